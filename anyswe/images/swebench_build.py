"""Build SWE-bench instance images offline, the way swebench 4.1.0 builds them.

swebench builds a chain of three docker images (``swebench/harness/docker_build.py`` with the
Dockerfiles of ``swebench/harness/dockerfiles/python.py``):

* a *base* image: an OS, build tools and conda;
* an *env* image per environment script (``setup_env.sh``: ``conda create`` and the spec's pip
  packages), tagged with a hash of that script (``TestSpec.env_image_key``);
* the *instance* image (``setup_repo.sh``: clone, reset to the base commit, the spec's
  ``pre_install``/``install``, the "SWE-bench" setup commit), named
  ``swebench/sweb.eval.x86_64.<id>:latest``.

This module builds the same chain from swebench's own env and repo scripts
(:func:`anyswe.grading.swebench.env_script` and :func:`~anyswe.grading.swebench.repo_script`) on a
host whose only network is the package index and Debian's mirror. Where it must differ from
swebench, it says so where it does:

* **Debian instead of Ubuntu + conda.** There is no conda download here: the base image is
  ``anyswe/base:<debian>`` (built by ``scripts/provision.sh`` from Debian packages) whose own
  python has the spec's version (3.9: Debian 11, 3.11: Debian 12), with a *conda stand-in*:
  ``source /opt/miniconda3/bin/activate`` defines a shell function ``conda`` that knows
  ``create -n NAME python=X.Y``, ``activate`` and ``deactivate``. The "testbed env" is the system
  interpreter's own prefix (its python linked into ``/opt/miniconda3/envs/testbed/bin``), not a
  venv: sphinx's eval runs ``tox --current-env``, and tox-current-env links its env's python to the
  *base* interpreter, so a venv's packages would vanish there.
* **The repository from a local mirror.** The clone from GitHub is replaced by a clone over
  ``git://`` from a ``git daemon`` on docker's bridge (:mod:`anyswe.images.git_serve`), serving a copy of the
  mirror. The classic builder has no ``RUN --mount``: a mirror ``COPY``'d into the build would stay
  in a lower layer of the image however it were deleted later; cloned over the network, the image
  holds only ``/testbed`` as swebench's own leaves it (the repo script's ``gc`` prunes what is not
  reachable from the base commit and earlier tags).
* **Certificates at build time only.** pip inside a build reaches the index through the host's
  TLS-intercepting proxy: the host's CA bundle is copied into the env and instance builds, named by
  ``PIP_CERT`` (and, for npm in the JS chain, ``NODE_EXTRA_CA_CERTS``) as a build ``ARG`` (never in the
  image's environment) and deleted after the step that needs it.

Which env script a row's spec makes (pip, conda packages, the repository's requirements file read from
the mirror, or an environment file, refused), and what cannot be built here, is
:mod:`anyswe.images.swebench_env`'s.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import tempfile
import time
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from anyswe.config import cache_dir
from anyswe.errors import ImageBuildError
from anyswe.images.swebench_env import debian_release, differs, env_setup_script
from anyswe.sandbox.store import build_image, image_present, remove_image, run_in_image

if TYPE_CHECKING:
    from anyswe.datasets.instance import Instance

#: The host's CA bundle, given to pip inside builds (``ANYSWE_BUILD_CA_BUNDLE`` overrides; "" for none).
DEFAULT_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
#: What conda's python env has (pip, setuptools, wheel): Debian 11's pip 20.3 is too old for today's
#: setuptools' editable installs.
CONDA_LIKE_TOOLS = ("pip==23.3.2", "setuptools==68.2.2", "wheel==0.41.2")
#: A cold chain (apt for the base, pip for the env) on a slow index.
BUILD_TIMEOUT = 3600.0
_CA_IN_IMAGE = "/root/.anyswe-build-ca.crt"


@dataclass
class Step:
    """One image of the chain: its tag, whether this call built it, and how long that took."""

    kind: str  #: base, env or instance
    tag: str
    built: bool = False
    seconds: float = 0.0


@dataclass
class Chain:
    """The three images behind one instance image, as :func:`build_instance_image` left them."""

    instance_id: str
    steps: list[Step] = field(default_factory=list)

    @property
    def image(self) -> str:
        return self.steps[-1].tag

    @property
    def summary(self) -> str:
        """``base cached, env 11s, instance 46s``: what this call built, and how long each took."""
        return ", ".join(f"{s.kind} {s.seconds:.0f}s" if s.built else f"{s.kind} cached" for s in self.steps)

    def step(self, kind: str) -> Step:
        return next(s for s in self.steps if s.kind == kind)


# -- what is built ---------------------------------------------------------------------------------


def find_mirror(repo_mirror: Path, repo: str) -> Path:
    """The bare repository for ``owner/name`` under ``repo_mirror``: ``name.git``, ``owner__name.git``
    or ``owner/name.git``."""
    owner, _, name = repo.partition("/")
    tried = [repo_mirror / f"{name}.git", repo_mirror / f"{owner}__{name}.git", repo_mirror / owner / f"{name}.git"]
    for path in tried:
        if path.is_dir():
            return path
    raise ImageBuildError(f"no mirror of {repo} under {repo_mirror}: tried " + ", ".join(str(p) for p in tried))


# The files the builds are made of (anyswe/images/swebench_files/), each hashed into its image's tag:
# * activate: the conda stand-in. swebench's scripts only `source /opt/miniconda3/bin/activate`,
#   `conda create -n testbed python=X.Y [conda packages] -y` and `conda activate testbed`; anything
#   else is refused by name. `conda` is the same outside a sourced shell.
# * base.Dockerfile: swebench's _DOCKERFILE_BASE_PY on Debian: its packages from Debian's mirror
#   (configured in anyswe/base already), the stand-in where Miniconda would be, its `nonroot` user.
# * env.Dockerfile, instance.Dockerfile: swebench's _DOCKERFILE_ENV_PY and _DOCKERFILE_INSTANCE_PY,
#   plus the build-time CA (see the module docstring); the instance image is labelled with its env image.
_FILES = Path(__file__).with_name("swebench_files")


@functools.cache
def _file(name: str) -> str:
    return (_FILES / name).read_text()


def _ca_bundle() -> Path | None:
    path = os.environ.get("ANYSWE_BUILD_CA_BUNDLE", DEFAULT_CA_BUNDLE)
    return Path(path) if path and Path(path).is_file() else None


def _ca_lines(context: Path) -> dict[str, str]:
    """The Dockerfile lines that give pip the host's CA bundle for this build only."""
    bundle = _ca_bundle()
    if bundle is None:
        return {"ca_in": "", "ca_out": ""}
    shutil.copyfile(bundle, context / "build-ca.crt")
    # An ARG is in the environment of the RUN steps after it, never in the image's config.
    return {
        "ca_in": "\n".join(
            (
                f"COPY ./build-ca.crt {_CA_IN_IMAGE}",
                f"ARG PIP_CERT={_CA_IN_IMAGE}",
                f"ARG NODE_EXTRA_CA_CERTS={_CA_IN_IMAGE}",
            )
        ),
        "ca_out": f"RUN rm -f {_CA_IN_IMAGE}",
    }


def digest(*parts: str) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def activate_script() -> str:
    return _file("activate").replace("@TOOLS@", " ".join(CONDA_LIKE_TOOLS))


def base_tag(debian: str) -> str:
    """``anyswe/sweb.base.py.x86_64.<debian>-<hash>:latest``; the hash covers the base recipe."""
    h = digest(_file("base.Dockerfile"), activate_script(), _file("conda"), debian)[:10]
    return f"anyswe/sweb.base.py.x86_64.{debian}-{h}:latest"


def env_tag(setup_env: str, base: str) -> str:
    """Like swebench's ``env_image_key`` (a hash of the env script), with the base image in the hash:
    a changed base (or stand-in) makes new env images."""
    h = digest(setup_env, base, _file("env.Dockerfile"))[:22]
    return f"anyswe/sweb.env.py.x86_64.{h}:latest"


def _logs() -> Path:
    return cache_dir() / "swebench-build" / "logs"


def log_path(tag: str) -> Path:
    return _logs() / (tag.replace("/", "_").replace(":", "_") + ".log")


# -- building --------------------------------------------------------------------------------------


async def build_step(kind: str, tag: str, files: Mapping[str, str | bytes], dockerfile: str) -> Step:
    """Build ``dockerfile`` with ``files`` in its context as ``tag`` unless it is there; ``{ca_in}`` and
    ``{ca_out}`` in it give the build the host's CA bundle, for that build only."""
    step = Step(kind, tag)
    if await image_present(tag):
        return step
    root = cache_dir() / "swebench-build"
    root.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(dir=root, prefix="context-") as tmp:
        context = Path(tmp)
        fields = _ca_lines(context) if "{ca_in}" in dockerfile else {}
        for name, content in files.items():
            if isinstance(content, bytes):
                (context / name).write_bytes(content)
            else:
                (context / name).write_text(content)
        for key, value in fields.items():  # not str.format: a Dockerfile's shell has braces of its own
            dockerfile = dockerfile.replace("{" + key + "}", value)
        (context / "Dockerfile").write_text(dockerfile)
        try:
            await build_image(context / "Dockerfile", tag, log=log_path(tag), timeout=BUILD_TIMEOUT)
        except ImageBuildError as exc:
            raise ImageBuildError(f"{exc}\n(the whole {kind} build's output: {log_path(tag)})") from None
    step.built, step.seconds = True, time.monotonic() - t0
    return step


async def build_base_image(debian: str) -> Step:
    """The base image for a Debian release (``anyswe/base:<debian>`` must exist)."""
    debian_image = f"anyswe/base:{debian}"
    if not await image_present(debian_image):
        raise ImageBuildError(
            f"{debian_image} is not present: build it with `bash scripts/provision.sh "
            f"{'image' if debian == 'bookworm' else 'image-' + debian}`"
        )
    files = {"activate": activate_script(), "conda": _file("conda")}
    dockerfile = _file("base.Dockerfile").replace("{debian_image}", debian_image)
    return await build_step("base", base_tag(debian), files, dockerfile)


async def build_env_image(instance: Instance, mirror: Path | None = None) -> tuple[Step, Step]:
    """The base and env images ``instance``'s image is built on (a requirements file read from ``mirror``)."""
    setup_env = env_setup_script(instance, mirror)
    base = await build_base_image(debian_release(instance))
    tag = env_tag(setup_env, base.tag)
    dockerfile = _file("env.Dockerfile").replace("{base_image}", base.tag).replace("{differs}", differs(instance))
    env = await build_step("env", tag, {"setup_env.sh": setup_env}, dockerfile)
    return base, env


async def build_instance_image(instance: Instance, repo_mirror: Path, *, verify: bool = True) -> Chain:
    """Build (or find, by tag) ``instance``'s image and the images under it; see the module docstring.

    The instance image gets swebench's official name. A freshly built one is checked
    (:func:`check_instance_image`) and removed again if it does not hold what swebench's would.
    """
    from anyswe.grading import swebench as sb

    tag = sb.official_image(instance.instance_id)
    chain = Chain(instance.instance_id)
    mirror = find_mirror(repo_mirror, instance.repo)  # named even when the images are all there
    chain.steps.extend(await build_env_image(instance, mirror))
    env = chain.steps[-1].tag
    if await image_present(tag):
        chain.steps.append(Step("instance", tag))
        return chain
    t0 = time.monotonic()
    from anyswe.images.git_serve import serve_mirror

    async with serve_mirror(mirror) as url:
        setup_repo = sb.repo_script(instance, clone_from=url)
        step = await build_step(
            "instance", tag, {"setup_repo.sh": setup_repo}, _file("instance.Dockerfile").replace("{env_image}", env)
        )
    step.seconds = time.monotonic() - t0
    chain.steps.append(step)
    if verify and step.built:
        await kept_if_checked(tag, check_instance_image(tag, instance))
    return chain


async def kept_if_checked(tag: str, check: Awaitable[object]) -> None:
    """Await ``check`` of the freshly built ``tag``; on its :class:`ImageBuildError`, remove the image and raise:
    an image that does not hold what its benchmark's build would is never found by tag again."""
    try:
        await check
    except ImageBuildError:
        await remove_image(tag)
        raise


# -- what a built image holds ----------------------------------------------------------------------

# /testbed as swebench's repo script checks and leaves it: no commit after the base's time but the setup commit
# (its `git log --all --since`), no tag it deletes (its %ci string comparison). Older commits off the base's
# history (a maintenance branch's tags) stay, as in official images: `after_base`, which the seal hides.
_FACTS = """set -e
cd {workdir}
echo "head=$(git rev-parse HEAD)"
echo "parent=$(git rev-parse HEAD^)"
echo "subject=$(git log -1 --format=%s HEAD)"
echo "after_base=$(git rev-list --all --not {base} | tr '\\n' ' ')"
echo "after_base_branches=$(git rev-list HEAD --branches --remotes --not {base} | tr '\\n' ' ')"
target=$(git show -s --format=%ci {base})
since=$(date -d "$target + 1 second" '+%Y-%m-%d %H:%M:%S')
echo "later=$(git log --all --since="$since" --format=%H | tr '\\n' ' ')"
echo "later_tags=$(git for-each-ref --format='%(refname:short)' refs/tags | while read -r t; do
  [[ "$(git show -s --format=%ci "$(git rev-list -n 1 "$t")")" > "$target" ]] && echo "$t"; done | tr '\\n' ' ')"
echo "changed=$(git diff --name-only {base} HEAD | tr '\\n' ' ')"
echo "refs=$(git for-each-ref --format='%(refname)' | grep -v '^refs/tags/' | tr '\\n' ' ')"
echo "dirty=$(git status --porcelain --untracked-files=no | wc -l)"
"""


async def image_facts(tag: str, base_commit: str, workdir: str = "/testbed") -> dict[str, str | list[str]]:
    """What ``/testbed`` in ``tag`` holds: HEAD, its parent and subject, the commits not in the base
    commit's history (``after_base``; ``after_base_branches``: reachable from HEAD or a branch), those
    committed after it (``later``) and the tags whose commit's date is after its (``later_tags``, as
    swebench compares them), the files the setup commit changed, the refs but tags."""
    script = _FACTS.format(base=base_commit, workdir=workdir)
    r = await run_in_image(tag, script, timeout=300)
    if r.exit_code != 0 or r.timed_out:
        raise ImageBuildError(
            f"could not read /testbed in {tag} (exit {r.exit_code}): {r.stderr.decode(errors='replace')[-800:]}"
        )
    facts: dict[str, str | list[str]] = {}
    for line in r.stdout.decode().splitlines():
        key, _, value = line.partition("=")
        facts[key] = (
            value.split()
            if key in ("after_base", "after_base_branches", "later", "later_tags", "changed", "refs")
            else value.strip()
        )
    return facts


async def check_instance_image(tag: str, instance: Instance) -> dict[str, str | list[str]]:
    """Fail unless ``tag``'s ``/testbed`` is as swebench leaves it: HEAD is the "SWE-bench" setup commit,
    its parent the base commit, no other commit after the base commit's time is reachable and no tag
    swebench deletes is left, whether the mirror was shallow or whole (``_FACTS``)."""
    facts = await image_facts(tag, instance.base_commit)
    problems = []
    if facts.get("subject") != "SWE-bench":
        problems.append(f"HEAD's subject is {facts.get('subject')!r}, not 'SWE-bench'")
    if facts.get("parent") != instance.base_commit:
        problems.append(f"HEAD's parent is {facts.get('parent')}, not the base commit {instance.base_commit}")
    if facts.get("later") != [facts.get("head")]:
        problems.append(f"commits after the base commit's time other than HEAD: {facts.get('later')}")
    if facts.get("later_tags"):
        problems.append(f"tags after the base commit's time: {facts.get('later_tags')}")
    if facts.get("dirty") != "0":
        problems.append(f"{facts.get('dirty')} tracked file(s) changed after the setup commit")
    if problems:
        raise ImageBuildError(f"{tag} is not as swebench's build leaves it: " + "; ".join(problems))
    return facts


__all__ = [
    "Chain",
    "Step",
    "base_tag",
    "build_base_image",
    "build_env_image",
    "build_instance_image",
    "build_step",
    "check_instance_image",
    "digest",
    "env_tag",
    "find_mirror",
    "image_facts",
    "kept_if_checked",
    "log_path",
]
