"""SWE-bench Pro instance images built offline from the benchmark's own two Dockerfiles per instance.

Pro's recipe (``dockerfiles/base_dockerfile/<id>`` and ``instance_dockerfile/<id>`` in its assets):
the base starts from a public image (``python:3.11-slim`` for the Python instances), installs
system packages, clones the repository from GitHub into ``/app`` and checks out an environment
commit; the instance image writes ``/preprocess.sh`` (a reset to the base commit) and ``/build.sh``
(its dependencies, with pip pointed at ``pypi-timemachine``, a proxy of the package index that hides
releases after a date) with BuildKit heredocs, and runs both. Built here, with each difference
named in the image's ``org.anyswe.differs`` label:

* **Debian 12 (``anyswe/base:bookworm``) for ``python:3.11-slim``**: Debian's python 3.11.2 with its
  pip, marked not externally managed, as the official image's python is (3.11.x from python.org;
  its pip as the image shipped it). Only ``python:3.11`` bases are built; others say so.
* **pip's own date cutoff for pypi-timemachine**: the proxy fetches from the public index by URL,
  which is not reachable here. pip 26.3 (pinned, installed for the build) has
  ``--uploaded-prior-to``; ``/build.sh`` exports ``PIP_UPLOADED_PRIOR_TO=<the same date>`` where
  it would have pointed pip at the proxy, so every install after that point sees the same releases.
* **The repository from a local mirror** over ``git://`` (:mod:`anyswe.images.git_serve`), its
  ``origin`` URL set back to GitHub's, as the official clone leaves it.
* **Heredocs as files**: the classic builder has no ``RUN <<EOF``; each heredoc's text is put in
  the build context and ``COPY``'d to the path it would have been written to.
* **The host's CA bundle** for pip at build time only (as for the SWE-bench chains).
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from anyswe.errors import ImageBuildError
from anyswe.images.swebench_build import Chain, Step, build_step, digest, find_mirror, image_facts, kept_if_checked
from anyswe.sandbox.store import image_present

if TYPE_CHECKING:
    from anyswe.datasets.instance import Instance

DEBIAN_IMAGE = "anyswe/base:bookworm"
#: The first pip with ``--uploaded-prior-to`` that this index has, pinned.
PIP_WITH_CUTOFF = "pip==26.3"
#: What stands in for ``python:3.11-slim``: Debian's python 3.11, its pip usable as the official image's is.
_PYTHON_SLIM = f"""FROM {DEBIAN_IMAGE}
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-pip python3-venv python-is-python3 \\
 && rm -rf /var/lib/apt/lists/* && rm -f /usr/lib/python3*/EXTERNALLY-MANAGED \\
 && ln -sf /usr/bin/pip3 /usr/local/bin/pip
{{ca_in}}
RUN python -m pip install --no-cache-dir {PIP_WITH_CUTOFF}
{{ca_out}}"""
DIFFERS = (
    "base Debian 12 (anyswe/base:bookworm, python 3.11.2) for python:3.11-slim; pip's --uploaded-prior-to for "
    f"pypi-timemachine ({PIP_WITH_CUTOFF}); repository cloned from a local mirror for GitHub"
)
_CLONE = re.compile(r"^RUN git clone (https://github\.com/([^/\s]+/[^/\s]+?))(?:\.git)? (\S+)\s*$")
_HEREDOC = re.compile(r"^RUN cat <<'?(\w+)'? > (\S+)\s*$")
_TIMEMACHINE = re.compile(r"^\s*pypi-timemachine (\S+) ")


def pro_assets(instance: Instance) -> dict[str, Any]:
    found = (instance.model_extra or {}).get("pro_assets")
    if not isinstance(found, dict) or "base_dockerfile" not in found:
        raise ImageBuildError(f"{instance.instance_id}: the row has no SWE-bench Pro Dockerfiles (set `assets:`)")
    return found


def base_dockerfile(text: str, clone_url: str) -> tuple[str, str]:
    """Pro's base Dockerfile as built here; and the repository (owner/name) it clones."""
    lines, repo = [], ""
    for line in text.split("\n"):
        if line.startswith("FROM "):
            if not line.split()[1].startswith("python:3.11"):
                raise ImageBuildError(f"its base is {line.split()[1]}: only python:3.11 bases are built offline")
            lines.append(_PYTHON_SLIM)
        elif m := _CLONE.match(line):
            repo = m.group(2)
            lines.append(f"RUN git clone {clone_url} {m.group(3)} && git remote set-url origin {m.group(1)}.git")
        else:
            lines.append(line)
    if not repo:
        raise ImageBuildError("its base Dockerfile clones no GitHub repository")
    return "\n".join(lines), repo


def build_script(text: str) -> str:
    """``/build.sh`` with pip's own cutoff where the proxy was started and pip pointed at it."""
    out, date = [], ""
    for line in text.split("\n"):
        if m := _TIMEMACHINE.match(line):
            date = m.group(1)
            continue
        if line.strip() in ("pip install pypi-timemachine", "sleep 3"):
            continue
        if line.strip().startswith("pip config set global.index-url http://127.0.0.1:"):
            out.append(f"export PIP_UPLOADED_PRIOR_TO={date}  # anyswe: for pypi-timemachine {date}")
            continue
        out.append(line)
    return "\n".join(out)


def instance_dockerfile(text: str, base: str) -> tuple[str, dict[str, str]]:
    """Pro's instance Dockerfile on ``base``, its heredocs as files of the context (name -> text)."""
    lines: list[str] = []
    files: dict[str, str] = {}
    it = iter(text.split("\n"))
    for line in it:
        if line.startswith("FROM "):
            lines.append(f"FROM {base}")
        elif m := _HEREDOC.match(line):
            body = []
            for inner in it:
                if inner == m.group(1):
                    break
                body.append(inner)
            name = f"heredoc-{len(files)}"
            content = "\n".join(body) + "\n"
            files[name] = build_script(content) if m.group(2) == "/build.sh" else content
            lines.append(f"COPY ./{name} {m.group(2)}")
        elif line.strip() == "RUN /build.sh":
            lines += ["{ca_in}", line, "{ca_out}"]
        else:
            lines.append(line)
    return "\n".join(lines) + f'\nLABEL org.anyswe.differs="{DIFFERS}"\n', files


async def build_pro_image(instance: Instance, repo_mirror: Path, *, verify: bool = True) -> Chain:
    """Build (or find, by tag) ``instance``'s official image (``docker_image`` of its row); see the docstring."""
    from anyswe.images.git_serve import serve_mirror

    assets = pro_assets(instance)
    tag = str((instance.model_extra or {}).get("docker_image") or "")
    if not tag:
        raise ImageBuildError(f"{instance.instance_id}: the row names no image (docker_image)")
    chain = Chain(instance.instance_id)
    mirror = find_mirror(repo_mirror, instance.repo)
    base_dockerfile(assets["base_dockerfile"], "")  # refuses a base it cannot build before anything is served
    base_tag = f"anyswe/sweap-base:{digest(assets['base_dockerfile'], _PYTHON_SLIM)[:16]}"
    if not await image_present(base_tag):
        async with serve_mirror(mirror) as url:
            text, _ = base_dockerfile(assets["base_dockerfile"], url)
            chain.steps.append(await build_step("base", base_tag, {}, text))
    else:
        chain.steps.append(Step("base", base_tag))
    if await image_present(tag):
        chain.steps.append(Step("instance", tag))
        return chain
    t0 = time.monotonic()
    dockerfile, files = instance_dockerfile(assets["instance_dockerfile"], base_tag)
    step = await build_step("instance", tag, files, dockerfile)
    step.seconds = time.monotonic() - t0
    chain.steps.append(step)
    if verify and step.built:
        await kept_if_checked(tag, check_pro_image(tag, instance))
    return chain


async def check_pro_image(tag: str, instance: Instance) -> dict[str, str | list[str]]:
    """Fail unless ``/app`` in ``tag`` is at the base commit, as Pro's preprocess leaves it."""
    facts = await image_facts(tag, instance.base_commit, workdir="/app")
    if facts.get("head") != instance.base_commit:
        raise ImageBuildError(f"{tag}: /app is at {facts.get('head')}, not the base commit {instance.base_commit}")
    return facts


__all__ = ["DIFFERS", "base_dockerfile", "build_pro_image", "build_script", "check_pro_image", "instance_dockerfile"]
