"""What is kept of a command's output is capped (issue 21): real host processes, no sandbox needed."""

from __future__ import annotations

import asyncio
import resource

from anyswe import _proc


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def test_small_output_is_whole() -> None:
    r = run(_proc.run(["sh", "-c", "printf abc; printf err >&2"], max_output=16))
    assert (r.stdout, r.stderr, r.stdout_dropped, r.stderr_dropped, r.truncated) == (b"abc", b"err", 0, 0, False)


def test_output_at_the_cap_is_whole() -> None:
    r = run(_proc.run(["head", "-c", "64", "/dev/zero"], max_output=64))
    assert r.stdout == b"\0" * 64 and r.stdout_dropped == 0


def test_over_the_cap_keeps_head_and_tail_and_counts_the_rest() -> None:
    # 0..9 repeated: the head and the tail are recognisable, the middle is counted, not kept.
    script = "python3 -c \"import sys; sys.stdout.write(''.join(str(i % 10) for i in range(1_000_000)))\""
    r = run(_proc.run(["sh", "-c", script], max_output=1000))
    assert r.truncated and r.stdout_dropped == 1_000_000 - 1000 and r.stderr_dropped == 0
    head, marker, tail = r.stdout[:500], r.stdout[500:-500], r.stdout[-500:]
    assert head == b"0123456789" * 50 and tail == b"0123456789" * 50
    assert marker == _proc.cut_marker("stdout", 999_000) and b"999000 bytes of stdout cut here" in marker


def test_streaming_callback_sees_everything() -> None:
    seen = {"stdout": 0, "stderr": 0}

    def on_output(stream: str, chunk: bytes) -> None:
        seen[stream] += len(chunk)

    r = run(_proc.run_streaming(["head", "-c", "3000000", "/dev/zero"], on_output=on_output, max_output=4096))
    assert seen["stdout"] == 3_000_000 and len(r.stdout) < 4096 + 100 and r.stdout_dropped == 3_000_000 - 4096


def test_a_huge_output_does_not_grow_the_host() -> None:
    """300 MB through the 16 MiB cap: the peak grows by far less than the output (before the cap:
    about 600 MiB, the buffer and its copy). Measured: about 50 MiB in a warm process, up to 170
    once in a fresh one (the allocator's first large blocks), so the bound is loose but below 300."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    r = run(_proc.run(["head", "-c", str(300 * 1024 * 1024), "/dev/zero"], timeout=120))
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert r.exit_code == 0 and r.stdout_dropped == 300 * 1024 * 1024 - _proc.MAX_OUTPUT_BYTES
    assert grown_mib < 256, f"peak RSS grew by {grown_mib:.0f} MiB"
