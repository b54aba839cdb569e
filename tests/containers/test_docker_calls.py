"""The docker provider's fewer calls keep their answers: one image inspect per image, PID 1's pid from
the start's inspect, and the sweep's one inspect of every container, on a real dockerd."""

from __future__ import annotations

import asyncio
import subprocess
import uuid
from pathlib import PurePosixPath
from typing import Any

import pytest

from anyswe import _proc
from anyswe.sandbox import get_provider
from anyswe.sandbox.docker import DockerProvider

pytestmark = pytest.mark.containers


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Every docker call the provider makes through ``_proc.run``, in order."""
    calls: list[list[str]] = []
    real = _proc.run

    async def run(argv: Any, **kw: Any) -> _proc.ProcResult:
        calls.append(list(argv))
        return await real(argv, **kw)

    monkeypatch.setattr(_proc, "run", run)
    return calls


def test_one_image_inspect_answers_presence_provenance_and_workdir(
    docker_image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _counting(monkeypatch)
    provider = get_provider("docker")
    assert isinstance(provider, DockerProvider)
    wanted = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Id}} {{.Config.WorkingDir}}", docker_image],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()

    async def go() -> None:
        assert await provider.image_exists(docker_image)
        assert (await provider.image_provenance(docker_image)).digest == wanted[0]
        workdir = wanted[1] if len(wanted) > 1 and wanted[1].startswith("/") else "/"
        assert await provider.image_workdir(docker_image) == str(PurePosixPath(workdir))
        assert not await provider.image_exists(f"anyswe-test/absent-{uuid.uuid4().hex[:8]}:x")

    asyncio.run(go())
    inspects = [c for c in calls if c[1:3] == ["image", "inspect"]]
    assert len(inspects) == 2, inspects  # the present image once, the absent one once


def test_pid_1_known_from_the_start_until_the_container_ends(docker_image: str) -> None:
    provider = get_provider("docker")

    async def go() -> None:
        sb = await provider.start(docker_image, run_id=f"calls-{uuid.uuid4().hex[:8]}")
        try:
            pid = await provider.init_pid(sb.name)
            asked = subprocess.run(
                ["docker", "container", "inspect", "--format", "{{.State.Pid}}", sb.name],
                capture_output=True,
                text=True,
                check=True,
            )
            assert pid == int(asked.stdout) and await provider.gone_reason(sb.name) is None
            # Killed from outside: the remembered pid is no longer in the container's cgroup, and
            # docker's own state says how it ended.
            subprocess.run(["docker", "kill", sb.name], capture_output=True, check=True)
            for _ in range(50):
                if (reason := await provider.gone_reason(sb.name)) is not None:
                    break
                await asyncio.sleep(0.2)
            assert reason is not None and "killed" in reason, reason
            assert await provider.init_pid(sb.name) is None
        finally:
            await sb.stop()

    asyncio.run(go())


def test_the_sweep_skips_a_container_removed_between_its_listing_and_its_inspect(
    docker_image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = get_provider("docker")
    run_id = f"sweep-{uuid.uuid4().hex[:8]}"
    real = _proc.run

    async def go() -> None:
        kept_sb = await provider.start(docker_image, run_id=run_id)
        gone_sb = await provider.start(docker_image, run_id=run_id)
        try:

            async def run(argv: Any, **kw: Any) -> _proc.ProcResult:
                result = await real(argv, **kw)
                if list(argv)[1:3] == ["container", "ls"]:  # removed after it was listed
                    subprocess.run(["docker", "rm", "-f", gone_sb.name], capture_output=True, check=True)
                return result

            monkeypatch.setattr(_proc, "run", run)
            found = await provider.sandboxes()
            monkeypatch.setattr(_proc, "run", real)
            assert (found[kept_sb.name] or {}).get("anyswe.run_id") == run_id
            assert gone_sb.name not in found
        finally:
            monkeypatch.setattr(_proc, "run", real)
            await kept_sb.stop()
            await gone_sb.stop()

    asyncio.run(go())
