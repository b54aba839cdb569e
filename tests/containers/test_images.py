"""Image builds through python-on-whales, shared safely by concurrent tasks and successive event loops."""

from __future__ import annotations

import asyncio
import subprocess
import uuid
from pathlib import Path

import pytest

from anyswe._sync import run_sync
from anyswe.errors import ImageBuildError
from anyswe.sandbox.store import build_image, image_id

pytestmark = pytest.mark.containers


def test_two_waiters_in_two_successive_loops(docker_image: str, tmp_path: Path) -> None:
    """Jupyter runs experiments one after another on new loops: a build lock must not outlive its loop."""
    from python_on_whales import docker

    (tmp_path / "Dockerfile").write_text(f"FROM {docker_image}\nRUN echo {uuid.uuid4().hex} > /built\n")
    tag = f"anyswe-test/lock:{uuid.uuid4().hex[:12]}"

    async def two_waiters() -> list[str]:
        return await asyncio.gather(*(build_image(tmp_path / "Dockerfile", tag) for _ in range(2)))

    try:
        assert run_sync(two_waiters()) == [tag, tag]
        built = run_sync(image_id(tag))
        assert run_sync(two_waiters()) == [tag, tag]  # the second loop finds it built, no error
        assert run_sync(image_id(tag)) == built
    finally:
        docker.image.remove(tag, force=True)


def test_build_failure_carries_the_output_and_leaves_no_container(docker_image: str, tmp_path: Path) -> None:
    marker = f"broken-step-{uuid.uuid4().hex[:8]}"
    (tmp_path / "Dockerfile").write_text(f"FROM {docker_image}\nRUN echo {marker} && exit 3\n")
    with pytest.raises(ImageBuildError, match=marker):
        run_sync(build_image(tmp_path / "Dockerfile", f"anyswe-test/broken:{uuid.uuid4().hex[:12]}"))
    # The classic builder keeps a failed step's container unless told otherwise.
    # One `docker ps` lists every container with its command at once. Listing ids and then
    # inspecting each lost a race in CI: another worker's container was removed in between.
    listing = subprocess.run(
        ["docker", "ps", "--all", "--no-trunc", "--format", "{{.ID}} {{.Command}}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    left = [line for line in listing.splitlines() if marker in line]
    assert left == []
