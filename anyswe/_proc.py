"""Async subprocesses from argv lists: the one place anyswe starts host processes.

Commands are argv lists, never shell strings. A timeout kills the whole process group (the child
is started in a session of its own), so nothing it spawned outlives it. What is kept of each output
stream is capped (:data:`MAX_OUTPUT_BYTES`): a command in a sandbox is the agent's to choose, and
its output passes through the host's memory.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from anyswe.errors import RuntimeNotAvailable

#: Bytes kept of each stream (stdout, stderr) of one command by default: 16 MiB is far more than
#: any test log or patch of a real task, and bounds what one command (`yes`, `cat` of a big file)
#: costs the host. Past it, the first and the last half are kept, with a marker line between
#: (the end of an output, its result line or its error, is often what matters), and the bytes
#: between are counted in ``stdout_dropped`` / ``stderr_dropped``.
MAX_OUTPUT_BYTES = 16 * 1024 * 1024
#: The default cap of an agent's patch (spec ``limits.max_patch_bytes``), below the output cap it
#: is captured through: real fixes are kilobytes, SWE-bench's largest reference patches under 1 MiB.
MAX_PATCH_BYTES = 10 * 1024 * 1024


def cut_marker(stream: str, dropped: int | None) -> bytes:
    """The line put where a stream was cut: a reader (a model, a person) sees that it was, and how much
    (None: the rest, of a length not known yet)."""
    what = "the rest" if dropped is None else f"{dropped} bytes"
    return f"\n[anyswe: {what} of {stream} cut here: over the output cap]\n".encode()


@dataclass(frozen=True)
class ProcResult:
    argv: list[str]
    exit_code: int
    stdout: bytes
    stderr: bytes
    duration: float
    timed_out: bool
    #: Bytes of each stream that were counted but not kept (0: the stream is whole).
    stdout_dropped: int = 0
    stderr_dropped: int = 0

    @property
    def truncated(self) -> bool:
        return bool(self.stdout_dropped or self.stderr_dropped)


class _Kept:
    """What is kept of one stream under a cap: its head, a sliding tail, and the count of bytes between.

    Both are lists of the chunks as read, never one growing buffer: reallocating a buffer of
    megabytes per chunk fragments the heap (a 16 MiB cap then cost the host 170 MiB for 300 MB).
    """

    def __init__(self, limit: int) -> None:
        if limit < 2:
            raise ValueError(f"an output cap must be at least 2 bytes, not {limit}")
        self.head_room, self.tail_max = limit - limit // 2, limit // 2
        self.head: list[bytes] = []
        self.tail: collections.deque[bytes] = collections.deque()
        self.tail_len = self.dropped = 0

    def add(self, chunk: bytes) -> None:
        if self.head_room > 0:
            self.head.append(chunk[: self.head_room])
            chunk = chunk[self.head_room :]
            self.head_room -= len(self.head[-1])
        if not chunk:
            return
        self.tail.append(chunk)
        self.tail_len += len(chunk)
        # Whole chunks go once the tail is full without them; the last one is cut in value().
        while self.tail_len - len(self.tail[0]) >= self.tail_max:
            gone = self.tail.popleft()
            self.tail_len -= len(gone)
            self.dropped += len(gone)

    def value(self, stream: str) -> tuple[bytes, int]:
        tail = b"".join(self.tail)
        excess = max(len(tail) - self.tail_max, 0)
        dropped = self.dropped + excess
        if not dropped:
            return b"".join(self.head) + tail, 0
        return b"".join(self.head) + cut_marker(stream, dropped) + tail[excess:], dropped


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


# After a kill, output still in the pipes is read for this long. A process outside the killed
# group (inside a container, say) may hold the pipes open; it must not hold the caller too.
_DRAIN_SECONDS = 5.0

#: Called with ("stdout" | "stderr", chunk) as output arrives.
OnOutput = Callable[[str, bytes], None]


async def run(
    argv: Sequence[str],
    *,
    stdin: bytes | None = None,
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    max_output: int = MAX_OUTPUT_BYTES,
) -> ProcResult:
    """Run ``argv``, capturing stdout and stderr separately (at most ``max_output`` bytes of each kept).

    On timeout, or if the awaiting task is cancelled, the process group is killed before returning
    or re-raising, so a cancelled run never leaves a child behind.
    """
    return await run_streaming(argv, stdin=stdin, timeout=timeout, env=env, cwd=cwd, max_output=max_output)


async def _reap(proc: asyncio.subprocess.Process) -> None:
    """Wait for a killed process to exit without waiting for every holder of its pipes to close them."""
    transport = getattr(proc, "_transport", None)
    if transport is not None:
        transport.close()  # closes our ends of the pipes; the exit status is already known
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(proc.wait(), _DRAIN_SECONDS)


async def _spawn(
    argv: list[str], stdin: bytes | None, env: Mapping[str, str] | None, cwd: str | None
) -> asyncio.subprocess.Process:
    try:
        return await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
        )
    except FileNotFoundError as exc:
        raise RuntimeNotAvailable(f"executable not found: {argv[0]}", argv=argv) from exc


async def _pump(stream: asyncio.StreamReader | None, name: str, sink: _Kept, on_output: OnOutput | None) -> None:
    if stream is None:
        return
    while chunk := await stream.read(65536):
        sink.add(chunk)
        if on_output is not None:
            on_output(name, chunk)


async def _communicate(
    proc: asyncio.subprocess.Process, stdin: bytes | None, on_output: OnOutput | None, out: _Kept, err: _Kept
) -> None:
    """Feed stdin and collect both streams into ``out``/``err`` (so a timeout keeps what came so far)."""

    async def feed() -> None:
        if proc.stdin is not None:
            if stdin:
                proc.stdin.write(stdin)
                with contextlib.suppress(ConnectionError):
                    await proc.stdin.drain()
            proc.stdin.close()

    await asyncio.gather(
        feed(), _pump(proc.stdout, "stdout", out, on_output), _pump(proc.stderr, "stderr", err, on_output)
    )
    await proc.wait()


async def run_streaming(
    argv: Sequence[str],
    *,
    on_output: OnOutput | None = None,
    stdin: bytes | None = None,
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    max_output: int = MAX_OUTPUT_BYTES,
) -> ProcResult:
    """:func:`run`, with each chunk of output also handed to ``on_output`` as it arrives.

    ``on_output`` sees every byte, past the cap too: it is handed chunks, not a growing buffer, and
    what it keeps is its own business (a log file bounds its own size).
    """
    argv = [str(a) for a in argv]
    start = time.monotonic()
    proc = await _spawn(argv, stdin, env, cwd)
    timed_out = False
    out, err = _Kept(max_output), _Kept(max_output)
    try:
        await asyncio.wait_for(_communicate(proc, stdin, on_output, out, err), timeout)
    except TimeoutError:
        timed_out = True
        _kill_group(proc)
        with contextlib.suppress(TimeoutError):
            pumps = (_pump(proc.stdout, "stdout", out, on_output), _pump(proc.stderr, "stderr", err, on_output))
            await asyncio.wait_for(asyncio.gather(*pumps), _DRAIN_SECONDS)
        await _reap(proc)
    except BaseException:
        _kill_group(proc)
        with contextlib.suppress(Exception):
            await asyncio.shield(_reap(proc))
        raise
    # A killed process whose exit was not yet reaped reports as killed.
    code = proc.returncode if proc.returncode is not None else -signal.SIGKILL
    (stdout, out_dropped), (stderr, err_dropped) = out.value("stdout"), err.value("stderr")
    return ProcResult(argv, code, stdout, stderr, time.monotonic() - start, timed_out, out_dropped, err_dropped)
