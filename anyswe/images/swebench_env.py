"""A Python SWE-bench row's env image here: which script makes it, what differs from swebench's, and
whether it can be made at all.

swebench 4.1.0 writes the env script (``setup_env.sh``, ``make_env_script_list_py``) in one of four
ways, by the spec's ``packages``; each is handled as that script has it:

* **none** (``""``, with or without ``pip_packages``): ``conda create -n testbed python=X.Y``, then pip.
* **conda packages on the create line** (``pytest``; ``mpmath flake8``; ``numpy scipy cython ...``): the
  conda stand-in (swebench_files/activate) installs them with pip from the package index, each name
  mapped where PyPI's differs and conda's ``name=1.2`` read as pip's ``name==1.2.*``.
* **requirements.txt**: swebench downloads the repository's file from GitHub at the row's
  ``environment_setup_commit``; here it is read from the mirror at that commit, through swebench's own
  functions (the paths it tries, ``-r`` includes, the lines it drops, its replacements).
* **environment.yml** (``conda env create``): refused by name. Its dependencies are conda's (channels
  not reachable here; several have no wheel), and the rows that use it (matplotlib, xarray) have no
  mirror here to prove a substitute on.

What cannot be had is refused by name before any build (:func:`unbuildable`): a Python version Debian
does not ship, no mirror, a commit the mirror lacks, the environment file. Each difference is named
in the env image's ``org.anyswe.differs`` label (:func:`differs`).
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from anyswe.errors import ImageBuildError

if TYPE_CHECKING:
    from anyswe.datasets.instance import Instance

#: The Debian release whose own python has a spec's python version (``anyswe/base:<release>``).
DEBIAN_FOR_PYTHON = {"3.9": "bullseye", "3.11": "bookworm"}
#: What the image differs in, by the spec's kind of env (beside the base's own: Debian, the stand-in).
_DIFFERS = {
    "conda": "conda packages of the create line installed with pip from the package index",
    "requirements.txt": "the repository's requirements file read from the mirror at the environment setup commit",
}


def _specs(instance: Instance) -> dict[str, object]:
    from anyswe.errors import GradingError
    from anyswe.grading import swebench as sb

    try:
        return sb.instance_specs(instance)
    except GradingError as exc:  # no spec for the repo or version, or no usable swebench
        raise ImageBuildError(f"{exc}: no image can be built the way swebench builds it") from None


def env_kind(instance: Instance) -> str:
    """``pip``, ``conda``, ``requirements.txt`` or ``environment.yml``: how swebench's env script installs."""
    packages = str(_specs(instance).get("packages", "") or "")
    if packages in ("requirements.txt", "environment.yml"):
        return packages
    return "conda" if packages.strip() else "pip"


def debian_release(instance: Instance) -> str:
    """The Debian release of the base image for ``instance``'s spec python."""
    python = str(_specs(instance).get("python", ""))
    if python not in DEBIAN_FOR_PYTHON:
        known = ", ".join(f"{p} (Debian {d})" for p, d in DEBIAN_FOR_PYTHON.items())
        raise ImageBuildError(
            f"{instance.instance_id}: its spec wants python {python or '?'}, and the conda stand-in has only "
            f"a Debian release's own python: {known}"
        )
    return DEBIAN_FOR_PYTHON[python]


def env_commit(instance: Instance) -> str:
    """The commit swebench reads the repository's requirement files at."""
    return instance.environment_setup_commit or instance.base_commit


def _git(mirror: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    """``git`` reading objects of the bare repository ``mirror``, through an empty repository of its own:
    a mirror copied without its empty ``refs/`` (the shared ones) is no repository to git, and a read
    needs only objects (``GIT_OBJECT_DIRECTORY``; its alternates are followed)."""
    env = {**os.environ, "GIT_OBJECT_DIRECTORY": str(mirror / "objects")}
    return subprocess.run(["git", "--git-dir", str(_empty_repo()), *args], capture_output=True, env=env, timeout=60)


@functools.cache
def _empty_repo() -> Path:
    path = Path(tempfile.mkdtemp(prefix="anyswe-git-"))
    subprocess.run(["git", "init", "-q", "--bare", str(path)], check=True, capture_output=True, timeout=60)
    atexit.register(shutil.rmtree, path, True)
    return path


def mirror_reader(mirror: Path) -> Callable[[str, str], str | None]:
    """``read(commit, path)``: a file's text at a commit of the bare repository ``mirror``, None if absent."""

    def read(commit: str, path: str) -> str | None:
        r = _git(mirror, "show", f"{commit}:{path}")
        return r.stdout.decode(errors="replace") if r.returncode == 0 else None

    return read


def env_setup_script(instance: Instance, mirror: Path | None = None) -> str:
    """swebench's ``setup_env.sh`` for ``instance``; a requirements file is read from ``mirror``."""
    from anyswe.errors import GradingError
    from anyswe.grading import swebench as sb

    kind = env_kind(instance)
    if kind == "environment.yml":
        raise ImageBuildError(
            f"{instance.instance_id}: its spec creates the env from the repository's environment.yml "
            "(`conda env create`): conda's channels are not reachable here, so this env image cannot be built offline"
        )
    if kind == "requirements.txt" and mirror is None:
        raise ImageBuildError(
            f"{instance.instance_id}: its spec installs from the repository's requirements.txt, which swebench's env "
            "script downloads from GitHub; give the repository's mirror (--repo-mirror) to read it from"
        )
    read = mirror_reader(mirror) if kind == "requirements.txt" and mirror is not None else None
    try:
        return sb.env_script(instance, read_file=read)
    except GradingError as exc:  # the file is at none of the paths swebench tries
        raise ImageBuildError(f"{exc} (read from {mirror} at {env_commit(instance)})") from None


def differs(instance: Instance) -> str:
    """What ``instance``'s env image does otherwise than swebench's, for its ``org.anyswe.differs`` label."""
    base = "Debian's python in a conda stand-in, not Miniconda"
    extra = _DIFFERS.get(env_kind(instance))
    return f"{base}; {extra}" if extra else base


def unbuildable(instance: Instance, repo_mirror: Path) -> tuple[str, str] | None:
    """Why ``instance``'s image cannot be built here from ``repo_mirror``, checked before any build:
    ``(kind, message)``, the kind one of python, environment.yml, mirror, commit, requirements.txt; or None."""
    from anyswe.images.swebench_build import find_mirror

    checks: list[tuple[str, Callable[[], object]]] = [
        ("python", lambda: debian_release(instance)),
        ("environment.yml", lambda: env_kind(instance) != "environment.yml" or env_setup_script(instance)),
        ("mirror", lambda: find_mirror(repo_mirror, instance.repo)),
        ("commit", lambda: _has_commits(find_mirror(repo_mirror, instance.repo), instance)),
        ("requirements.txt", lambda: env_setup_script(instance, find_mirror(repo_mirror, instance.repo))),
    ]
    for kind, check in checks:
        try:
            check()
        except ImageBuildError as exc:
            return kind, str(exc)
    return None


def _has_commits(mirror: Path, instance: Instance) -> None:
    """The base commit, and the environment setup commit where a requirements file is read at it."""
    needed = [instance.base_commit] + ([env_commit(instance)] if env_kind(instance) == "requirements.txt" else [])
    for commit in dict.fromkeys(needed):
        if _git(mirror, "cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
            raise ImageBuildError(f"{instance.instance_id}: commit {commit} is not in the mirror {mirror}")


__all__ = [
    "DEBIAN_FOR_PYTHON",
    "debian_release",
    "differs",
    "env_commit",
    "env_kind",
    "env_setup_script",
    "mirror_reader",
    "unbuildable",
]
