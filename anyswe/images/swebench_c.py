"""C and C++ instance images (SWE-bench Multilingual's), built offline the way swebench 4.1.0 builds them,
and :func:`build_swebench_image`, which picks swebench's chain for a repository's language.

swebench's chain for a C repository (``harness/dockerfiles/c.py``, ``test_spec/utils.py``) has no
env step of its own: the env image is its base Dockerfile (``ubuntu:22.04``, build tools, cmake,
tcl, bison, ...), and the instance image runs ``setup_repo.sh``: clone from GitHub, ``chmod -R
777``, ``git reset --hard <base>``, remove the remote, then the spec's ``pre_install``, ``install``
and ``build`` commands (``make``, ``cmake --build``), in ``/testbed``. There is no "SWE-bench" setup
commit: HEAD is the base commit, and the build's outputs are in the work tree.

What differs here, and why (each also named in the image's ``org.anyswe.differs`` label):

* **Debian 12 in place of Ubuntu 22.04**, the same package names from Debian's mirror (the base
  image ``anyswe/base:bookworm`` has it configured). Compilers and tools are Debian's versions:
  gcc 12.2 (Ubuntu's 11.4), cmake 3.25 (3.22), bison 3.8.2 (the same), tcl 8.6.
* **The repository from a local mirror** over ``git://`` (:mod:`anyswe.images.git_serve`), in place
  of GitHub, as for Verified. A repository's **submodules** (jq's ``modules/oniguruma``) are served
  too, and git is told for the setup script's run only (``GIT_CONFIG_*`` in that ``RUN``'s
  environment, never in the image's) to fetch each submodule's GitHub URL from its mirror: the URL
  the image's ``.gitmodules`` and ``.git/config`` hold stays GitHub's.
"""

from __future__ import annotations

import functools
import subprocess
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from anyswe.errors import ImageBuildError
from anyswe.images.swebench_build import (
    Chain,
    Step,
    build_instance_image,
    build_step,
    digest,
    find_mirror,
    image_facts,
    kept_if_checked,
)
from anyswe.sandbox.store import image_present

if TYPE_CHECKING:
    from anyswe.datasets.instance import Instance

#: The base every C/C++ chain starts from (``bash scripts/provision.sh image`` builds it).
DEBIAN_IMAGE = "anyswe/base:bookworm"
_FILES = Path(__file__).with_name("swebench_files")
_GITHUB = "https://github.com/"


@functools.cache
def _file(name: str) -> str:
    return (_FILES / name).read_text()


def c_base_tag() -> str:
    """``anyswe/sweb.base.c.x86_64.bookworm-<hash>:latest``; the hash covers the recipe."""
    return f"anyswe/sweb.base.c.x86_64.bookworm-{digest(_file('c-base.Dockerfile'), DEBIAN_IMAGE)[:10]}:latest"


def submodules(mirror: Path, commit: str) -> dict[str, str]:
    """Path -> URL of each submodule ``.gitmodules`` names at ``commit`` of the bare repository ``mirror``."""
    with tempfile.TemporaryDirectory(prefix="anyswe-gitmodules-") as tmp:
        # Read through an empty repository whose objects are the mirror's: a mirror copied without its
        # empty refs/ (../shared's) is not a repository to git.
        subprocess.run(["git", "init", "-q", "--bare", tmp], check=True, capture_output=True)
        (Path(tmp) / "objects" / "info" / "alternates").write_text(f"{(mirror / 'objects').resolve()}\n")
        argv = ["git", "--git-dir", tmp, "config", "--blob", f"{commit}:.gitmodules", "--get-regexp", r"\.url$"]
        r = subprocess.run(argv, capture_output=True, text=True, check=False)
    if r.returncode == 1 and not r.stdout:  # no .gitmodules, or no URL in it
        return {}
    if r.returncode != 0:
        raise ImageBuildError(f"reading .gitmodules at {commit[:12]} of {mirror}: {r.stderr.strip()[-300:]}")
    found = {}
    for line in r.stdout.splitlines():
        key, _, url = line.partition(" ")
        found[key.removeprefix("submodule.").removesuffix(".url")] = url.strip()
    return found


def submodule_mirrors(mirror: Path, commit: str, repo_mirror: Path) -> dict[str, Path]:
    """Each submodule's GitHub URL -> its bare repository under ``repo_mirror`` (an error naming a missing one)."""
    found = {}
    for path, url in submodules(mirror, commit).items():
        if not url.startswith(_GITHUB):
            raise ImageBuildError(f"submodule {path} of {mirror.name} is at {url}: only GitHub URLs are mirrored")
        found[url] = find_mirror(repo_mirror, url.removeprefix(_GITHUB).removesuffix(".git"))
    return found


def _git_env(urls: dict[str, str]) -> str:
    """Environment assignments for one ``RUN``: git fetches each GitHub URL (key) from a mirror (value)."""
    pairs = [f"GIT_CONFIG_COUNT={len(urls)}"]
    for n, (github, served) in enumerate(urls.items()):
        pairs += [f"GIT_CONFIG_KEY_{n}=url.{served}.insteadOf", f"GIT_CONFIG_VALUE_{n}={github}"]
    return " ".join(pairs) + " "


async def build_c_base() -> Step:
    if not await image_present(DEBIAN_IMAGE):
        raise ImageBuildError(f"{DEBIAN_IMAGE} is not present: build it with `bash scripts/provision.sh image`")
    return await build_step("env", c_base_tag(), {}, _file("c-base.Dockerfile").replace("{debian_image}", DEBIAN_IMAGE))


DIFFERS = (
    "base Debian 12 (anyswe/base:bookworm) for ubuntu:22.04; repository and submodules cloned from local mirrors "
    "for GitHub"
)


async def build_c_image(instance: Instance, repo_mirror: Path, *, verify: bool = True) -> Chain:
    """Build (or find, by tag) a C/C++ instance's image on :func:`build_c_base`; see the module docstring."""
    from anyswe.grading import swebench as sb
    from anyswe.images.git_serve import serve_mirrors

    tag = sb.official_image(instance.instance_id)
    chain = Chain(instance.instance_id)
    mirror = find_mirror(repo_mirror, instance.repo)
    subs = submodule_mirrors(mirror, instance.base_commit, repo_mirror)
    chain.steps.append(await build_c_base())
    env = chain.steps[-1].tag
    if await image_present(tag):
        chain.steps.append(Step("instance", tag))
        return chain
    t0 = time.monotonic()
    async with serve_mirrors([mirror, *subs.values()]) as (url, *sub_urls):
        git_env = _git_env(dict(zip(subs, sub_urls, strict=True))) if subs else ""
        dockerfile = _file("c-instance.Dockerfile").format(env_image=env, git_env=git_env, differs=DIFFERS)
        files = {"setup_repo.sh": sb.repo_script(instance, clone_from=url)}
        step = await build_step("instance", tag, files, dockerfile)
    step.seconds = time.monotonic() - t0
    chain.steps.append(step)
    if verify and step.built:
        await kept_if_checked(tag, check_c_image(tag, instance))
    return chain


async def build_swebench_image(instance: Instance, repo_mirror: Path) -> Chain:
    """``instance``'s official image built offline by swebench's chain for its repository's language:
    Python (swebench_build.py) or C/C++ (this module); other languages are not built offline yet."""
    from anyswe.grading.swebench import repo_language

    language = repo_language(instance.repo) or "py"  # a repository swebench does not know: a RepoSpec's, Python
    if language == "py":
        return await build_instance_image(instance, repo_mirror)
    if language == "c":
        return await build_c_image(instance, repo_mirror)
    raise ImageBuildError(
        f"{instance.instance_id}: swebench builds {instance.repo} as {language}; anyswe builds SWE-bench images "
        "offline for Python, C and C++ only (pull the official image instead)"
    )


async def check_c_image(tag: str, instance: Instance) -> dict[str, str | list[str]]:
    """Fail unless ``tag``'s ``/testbed`` is at the base commit with no commit after it (swebench's C chain
    makes no setup commit), its submodules checked out at their gitlinks."""
    facts = await image_facts(tag, instance.base_commit)
    problems = []
    if facts.get("head") != instance.base_commit:
        problems.append(f"HEAD is {facts.get('head')}, not the base commit {instance.base_commit}")
    if facts.get("after_base"):
        problems.append(f"commits after the base commit are reachable: {facts.get('after_base')}")
    if problems:
        raise ImageBuildError(f"{tag} is not as swebench's C build leaves it: " + "; ".join(problems))
    return facts


__all__ = [
    "DIFFERS",
    "build_c_base",
    "build_c_image",
    "build_swebench_image",
    "c_base_tag",
    "check_c_image",
    "submodule_mirrors",
]
