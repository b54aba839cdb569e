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
