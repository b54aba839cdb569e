"""The demo's SWE-bench-shaped task images, made the way swebench makes an instance image.

The last step of an official image (swebench's own repo script, "SWE-bench" setup commit included)
on the demo's light base. It differs from :mod:`anyswe.images.swebench_build` in two ways, both
because the demo needs no more: no env script (the demo tasks need only Debian's python and pytest),
and the repository copied into the build instead of cloned. The copy holds the base commit and
nothing else (the demo derives its patches and prunes them away), and it is removed in the step
that clones it, so no sandbox sees it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from anyswe.images.swebench_build import activate_script

_DEMO_DOCKERFILE = """FROM {base_image}
COPY activate /opt/miniconda3/bin/activate
COPY testbed-env /opt/miniconda3/envs/testbed
COPY source /src/{name}
COPY setup_repo.sh /root/
RUN /bin/bash /root/setup_repo.sh && rm -rf /src
WORKDIR /testbed/
"""
# Debian's python3-pytest has no `pytest` command: the env's one runs the module.
_DEMO_PYTEST = '#!/bin/sh\nexec python3 -m pytest "$@"\n'


def demo_build_context(instance_id: str, base_image: str) -> tuple[Path, str]:
    """A docker build context (Dockerfile, tag) for a demo task's SWE-bench-shaped image.

    ``/testbed`` is made by swebench's own ``setup_repo.sh`` for the row's spec: reset to the base
    commit, the spec's ``pre_install`` (calc and inventory edit their pytest config), the "SWE-bench"
    setup commit. The tag is a hash of the whole context.
    """
    from anyswe.datasets import demo
    from anyswe.grading import swebench as sb
    from anyswe.grading.swebench_harness import own_spec

    instance, out = demo.swebench_instance(instance_id)
    name = instance.repo.rsplit("/", 1)[-1]
    setup_repo = sb.repo_script(instance, clone_from=f"/src/{name}", repo=own_spec(instance))
    dockerfile = _DEMO_DOCKERFILE.format(base_image=base_image, name=name)
    tag_hash = hashlib.sha256("\0".join([out.name, dockerfile, setup_repo, activate_script(), _DEMO_PYTEST]).encode())
    tag_hash_hex = tag_hash.hexdigest()[:12]
    tag = f"anyswe-demo/swe-{instance_id.replace('__', '_1776_').lower()}:{tag_hash_hex}"
    # Content-addressed and made whole before it appears: several processes (pytest-xdist workers,
    # a driver beside `anyswe serve`) build the same task's context at once, and one rebuilding it in
    # place while another's docker build reads it failed with EEXIST or sent a half-copied context.
    context = out / f"swebench-{tag_hash_hex}"
    if (context / "Dockerfile").is_file():
        return context / "Dockerfile", tag
    staging = Path(tempfile.mkdtemp(prefix=".swebench-", dir=out))
    try:
        (staging / "testbed-env" / "bin").mkdir(parents=True)
        os.symlink("/usr/bin/python3", staging / "testbed-env" / "bin" / "python")
        pytest_bin = staging / "testbed-env" / "bin" / "pytest"
        pytest_bin.write_text(_DEMO_PYTEST)
        pytest_bin.chmod(0o755)
        shutil.copytree(out / "testbed", staging / "source", symlinks=True)
        (staging / "activate").write_text(activate_script())
        (staging / "setup_repo.sh").write_text(setup_repo)
        (staging / "Dockerfile").write_text(dockerfile)  # written last: its presence means complete
        try:
            os.rename(staging, context)
        except OSError:  # another process put the same content there first
            if not (context / "Dockerfile").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return context / "Dockerfile", tag
