"""The demo benchmark: small Python repos with real bugs and real pytest tests, shipped in the package.

Each task is a directory under ``tasks/``: ``task.json`` (problem statement, FAIL_TO_PASS,
PASS_TO_PASS), ``base/`` (the repo at its base commit), ``fix/`` (files as the fix leaves them),
``tests/`` (test files as the test patch leaves them) and optionally ``sloppy/`` (a fix that makes
the failing tests pass but breaks a passing one). The SWE-bench row (base_commit, patch,
test_patch) is derived with git, deterministically, so the source of truth is the files alone.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path
from typing import Any, ClassVar

from anyswe.config import cache_dir
from anyswe.datasets.instance import Instance
from anyswe.datasets.registry import Benchmark
from anyswe.errors import DatasetError

TASKS_DIR = Path(__file__).parent / "tasks"
_FORMAT = "4"  # bump when the derivation below changes, to invalidate cached rows
# Fixed identity and dates make the base commit hash a function of the files alone.
_GIT_ENV = {
    "GIT_AUTHOR_NAME": "anyswe",
    "GIT_AUTHOR_EMAIL": "demo@anyswe.invalid",
    "GIT_COMMITTER_NAME": "anyswe",
    "GIT_COMMITTER_EMAIL": "demo@anyswe.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+00:00",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+00:00",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, **_GIT_ENV}
    r = subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise DatasetError(f"demo: git {' '.join(args)} failed in {repo}: {r.stderr.strip()}")
    return r.stdout


def content_hash(path: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        h.update(str(f.relative_to(path)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def _overlay_diff(repo: Path, overlay: Path) -> str:
    """The binary diff against HEAD after copying ``overlay`` over the work tree; the tree is reset after."""
    shutil.copytree(overlay, repo, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    # Rebuild the index from content: a copied file of the same size and an older mtime would
    # otherwise look unchanged to git's stat cache.
    _git(repo, "rm", "-r", "-q", "--cached", ".")
    _git(repo, "add", "-A")
    diff = _git(repo, "diff", "--cached", "--binary", "HEAD")
    _git(repo, "reset", "-q", "--hard", "HEAD")
    _git(repo, "clean", "-fdq")
    return diff


def materialize(task_dir: Path) -> tuple[Instance, Path]:
    """The task's row and a directory holding ``testbed/`` (the repo with only its base commit)."""
    meta = json.loads((task_dir / "task.json").read_text())
    digest = hashlib.sha256(f"{_FORMAT}:{content_hash(task_dir)}".encode()).hexdigest()[:16]
    out = cache_dir() / "demo" / f"{task_dir.name}-{digest}"
    row_path = out / "row.json"
    if row_path.is_file():
        return Instance.model_validate_json(row_path.read_text()), out
    tmp = Path(tempfile.mkdtemp(prefix=f"{task_dir.name}-", dir=out.parent if out.parent.exists() else None))
    try:
        repo = tmp / "testbed"
        shutil.copytree(task_dir / "base", repo, ignore=shutil.ignore_patterns("__pycache__"))
        _git(repo, "init", "-q", "-b", "main")
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", "base")
        base_commit = _git(repo, "rev-parse", "HEAD").strip()
        extra = {}
        if (task_dir / "sloppy").is_dir():
            extra["sloppy_patch"] = _overlay_diff(repo, task_dir / "sloppy")
        row = {
            **{k: v for k, v in meta.items() if k not in ("traits", "swebench_spec")},
            "base_commit": base_commit,
            "patch": _overlay_diff(repo, task_dir / "fix"),
            "test_patch": _overlay_diff(repo, task_dir / "tests"),
            "demo_traits": meta.get("traits", []),
            **extra,
        }
        # Deriving the patches stored the fixed and the test files as objects: the image must not
        # hold them (an agent would find the answer with `git fsck --lost-found`).
        _git(repo, "reflog", "expire", "--expire=now", "--all")
        _git(repo, "prune", "--expire=now")
        instance = Instance.model_validate(row)
        (tmp / "row.json").write_text(instance.model_dump_json(indent=1))
        out.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(tmp, out)
        except OSError:  # another process materialized it first
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return instance, out


@cache
def task_dirs() -> dict[str, Path]:
    """instance_id -> task directory."""
    found = {}
    for d in sorted(TASKS_DIR.iterdir()):
        if (d / "task.json").is_file():
            found[json.loads((d / "task.json").read_text())["instance_id"]] = d
    return found


#: Repos of the SWE-bench-shaped variant are prefixed so they never collide with swebench's own.
SWE_PREFIX = "demo-swe/"
#: The custom swebench spec each SWE-bench-shaped row carries (registered before grading); a task's
#: own ``swebench_spec`` in its task.json adds to it. Two tasks (calc, inventory) have a
#: ``pre_install`` that edits a tracked file, as every sphinx spec's does (tox.ini): their -rA lives
#: in the repository's pytest config, so the image's setup commit must be in force for a verdict.
SWE_SPEC = {"test_cmd": "pytest -rA -p no:cacheprovider"}


def load(*, swebench_shaped: bool = False) -> list[Instance]:
    """The demo rows; ``swebench_shaped`` gives the variant graded by the swebench harness."""
    rows = [materialize(d)[0] for d in task_dirs().values()]
    if not swebench_shaped:
        return rows
    return [
        Instance.model_validate(
            {**r.model_dump(), "repo": SWE_PREFIX + r.repo.split("/", 1)[-1], "swebench_spec": swebench_spec(r)}
        )
        for r in rows
    ]


def swebench_spec(instance: Instance) -> dict[str, Any]:
    """The swebench spec (test_cmd, pre_install, ...) of a demo task's SWE-bench-shaped row."""
    task_dir = task_dirs().get(instance.instance_id)
    own = json.loads((task_dir / "task.json").read_text()).get("swebench_spec", {}) if task_dir else {}
    return {**SWE_SPEC, **own}


def rows(*, swebench_shaped: bool = False) -> list[dict[str, Any]]:
    """The demo rows as plain JSON objects (what ``anyswe prepare dataset demo`` writes)."""
    return [i.model_dump(mode="json") for i in load(swebench_shaped=swebench_shaped)]


def build_context(instance_id: str, base_image: str, *, swebench_shaped: bool = False) -> tuple[Path, str]:
    """A docker build context for the task image (base image + /testbed) and its content tag.

    The SWE-bench-shaped variant is built the way swebench builds an instance image, by
    :func:`anyswe.images.demo_swebench.demo_build_context`.
    """
    if swebench_shaped:
        from anyswe.images.demo_swebench import demo_build_context

        return demo_build_context(instance_id, base_image)
    task_dir = task_dirs().get(instance_id)
    if task_dir is None:
        raise DatasetError(f"no demo task {instance_id!r}")
    _, out = materialize(task_dir)
    dockerfile = f"FROM {base_image}\nCOPY testbed /testbed\nWORKDIR /testbed\n"
    docker_file = out / "Dockerfile"
    if not docker_file.is_file() or docker_file.read_text() != dockerfile:
        # Renamed into place: another process's docker build may be reading it (a truncating write
        # gave it an empty Dockerfile for a moment).
        fd, tmp = tempfile.mkstemp(prefix=".Dockerfile-", dir=out)
        with os.fdopen(fd, "w") as fh:
            fh.write(dockerfile)
        os.replace(tmp, docker_file)
    tag_hash = hashlib.sha256((out.name + "\0" + dockerfile).encode()).hexdigest()[:12]
    return docker_file, f"anyswe-demo/{instance_id.replace('__', '_1776_').lower()}:{tag_hash}"


def swebench_instance(instance_id: str) -> tuple[Instance, Path]:
    """A demo task's SWE-bench-shaped row, and the directory holding its ``testbed/`` repository."""
    task_dir = task_dirs().get(instance_id)
    if task_dir is None:
        raise DatasetError(f"no demo task {instance_id!r}")
    _, out = materialize(task_dir)
    row = next(i for i in load(swebench_shaped=True) if i.instance_id == instance_id)
    return row, out


def scripts() -> dict[str, list[str]]:
    """Per task, the shell commands that write its fixed files into /testbed: the scripted model's script.

    Made from each task's ``fix/`` directory on the host (what a scripted agent would type), never
    from the gold patch inside a sandbox; ``specs/demo-scripts`` holds them as files.
    """
    out: dict[str, list[str]] = {}
    for iid, task_dir in task_dirs().items():
        steps = []
        for path in sorted(p for p in (task_dir / "fix").rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            rel = path.relative_to(task_dir / "fix").as_posix()
            body = path.read_text()
            delimiter = "ANYSWE_SCRIPT_EOF"
            while delimiter in body:
                delimiter += "_X"
            end = "" if body.endswith("\n") else "\n"
            write = f"mkdir -p \"$(dirname /testbed/{rel})\" && cat > /testbed/{rel} <<'{delimiter}'"
            steps.append(f"{write}\n{body}{end}{delimiter}")
        out[iid] = steps
    return out


class DemoBenchmark(Benchmark):
    """``demo``: the tasks above, in images built here on the base image, graded by the pytest harness."""

    name: ClassVar[str] = "demo"
    harness: ClassVar[str] = "pytest"
    builds_images: ClassVar[bool] = True
    swebench_shaped: ClassVar[bool] = False

    def rows(self) -> list[dict[str, Any]]:
        return rows(swebench_shaped=self.swebench_shaped)

    def build_context(self, instance_id: str, base_image: str) -> tuple[Path, str]:
        return build_context(instance_id, base_image, swebench_shaped=self.swebench_shaped)


class DemoSwebenchBenchmark(DemoBenchmark):
    """``demo-swebench``: the same tasks shaped like SWE-bench's images (/testbed, a conda ``testbed``
    env, the setup commit), graded by swebench's own scripts and parsers."""

    name: ClassVar[str] = "demo-swebench"
    harness: ClassVar[str] = "swebench"
    swebench_shaped: ClassVar[bool] = True
