"""Issue 21, "the host can be exhausted from inside a task": what a sandbox can cost the host is bounded.

Output kept per command, docker's memory and pids limits (a fork bomb), apptainer's /tmp and home
inside the size-limited overlay, on the real runtimes.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from anyswe import _proc
from anyswe.errors import SandboxFileError
from anyswe.sandbox import get_provider

pytestmark = pytest.mark.containers


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def test_command_output_is_capped_and_counted(provider_image: tuple[str, str], tmp_path: Path) -> None:
    name, image = provider_image
    log = tmp_path / "stream.log"

    async def go() -> None:
        async with get_provider(name).sandbox(image) as sb:
            # 40 MB of stdout, a line of stderr: stdout keeps its head and its tail, stderr is whole.
            r = await sb.exec("head -c 40000000 /dev/zero | tr '\\0' x; echo END; echo oops >&2")
            assert r.ok and r.truncated and r.stderr == "oops\n" and r.stderr_dropped == 0
            assert r.stdout_dropped == 40_000_004 - _proc.MAX_OUTPUT_BYTES
            assert r.stdout.startswith("x" * 1000) and r.stdout.endswith("xxxEND\n")
            assert f"[anyswe: {r.stdout_dropped} bytes of stdout cut here" in r.stdout
            # A smaller cap per exec, and the streamed log file on the host bounded by it too.
            seen: list[int] = []
            r = await sb.exec_stream(
                "head -c 1000000 /dev/zero", log_path=log, max_output=4096, on_output=lambda s, t: seen.append(len(t))
            )
            assert r.stdout_dropped == 1_000_000 - 4096 and sum(seen) == 1_000_000
            assert 4096 < log.stat().st_size < 4096 + 200 and b"the rest of stdout cut here" in log.read_bytes()
            # A file over the cap is refused, not handed back cut (which would be corrupt data).
            assert (await sb.exec(["dd", "if=/dev/zero", "of=/big.bin", "bs=1M", "count=17"])).ok
            with pytest.raises(SandboxFileError, match="too large to read back"):
                await sb.read_file("/big.bin")
            assert (await sb.exec("echo alive")).stdout == "alive\n"

    run(go())


def _docker_pids(name: str) -> int:
    import subprocess

    out = subprocess.run(
        ["docker", "stats", "--no-stream", "--format", "{{.PIDs}}", name], capture_output=True, text=True
    )
    return int(out.stdout.strip() or 0)


def test_docker_sandboxes_have_memory_and_pids_limits_by_default(docker_image: str) -> None:
    from python_on_whales import docker

    async def go() -> None:
        async with get_provider("docker").sandbox(docker_image) as sb:
            host = docker.container.inspect(sb.name).host_config
            assert host.memory == 8 * 1024**3 and host.memory_swap == 8 * 1024**3 and host.pids_limit == 4096
        # null in a spec turns a limit off, a value changes it.
        async with get_provider("docker", {"memory": None, "pids_limit": None}).sandbox(docker_image) as sb:
            host = docker.container.inspect(sb.name).host_config
            assert not host.memory and not host.memory_swap and host.pids_limit in (None, 0, -1)
        async with get_provider("docker", {"memory": "300m", "pids_limit": 64}).sandbox(docker_image) as sb:
            host = docker.container.inspect(sb.name).host_config
            assert host.memory == host.memory_swap == 300 * 1024**2 and host.pids_limit == 64

    run(go())


def test_a_fork_bomb_stays_in_its_docker_sandbox(docker_image: str) -> None:
    """The bomb fills the sandbox's 4096 pids and no more; the host still forks; the sandbox recovers."""
    import subprocess

    async def go() -> None:
        async with get_provider("docker").sandbox(docker_image) as sb:
            bomb = asyncio.ensure_future(sb.exec("bomb() { bomb | bomb & }; bomb; sleep 30", timeout=20))
            peak = 0
            for _ in range(30):
                await asyncio.sleep(0.5)
                peak = max(peak, await asyncio.to_thread(_docker_pids, sb.name))
                if peak >= 4000:
                    break
            # The host is fine meanwhile: it starts processes, and its own count is far from pid_max.
            assert subprocess.run(["true"]).returncode == 0
            host_pids = sum(1 for p in Path("/proc").iterdir() if p.name.isdigit())
            pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
            assert 4000 <= peak <= 4096, peak
            assert host_pids < pid_max - 4096, (host_pids, pid_max)
            r = await bomb
            assert r.timed_out
            # The helper killed the bomb's process group at the timeout: the sandbox takes commands again.
            for _ in range(40):
                alive = await sb.exec("echo alive", timeout=10)
                if alive.stdout == "alive\n":
                    break
                await asyncio.sleep(0.5)
            assert alive.stdout == "alive\n", alive
        assert subprocess.run(["docker", "container", "inspect", sb.name], capture_output=True).returncode != 0

    run(go())
