"""Async subprocesses from argv lists: the one place anyswe starts host processes.

Commands are argv lists, never shell strings. A timeout kills the whole process group (the child
is started in a session of its own), so nothing it spawned outlives it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from anyswe.errors import RuntimeNotAvailable


@dataclass(frozen=True)
class ProcResult:
    argv: list[str]
    exit_code: int
    stdout: bytes
    stderr: bytes
    duration: float
    timed_out: bool


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
) -> ProcResult:
    """Run ``argv``, capturing stdout and stderr separately.

    On timeout, or if the awaiting task is cancelled, the process group is killed before returning
    or re-raising, so a cancelled run never leaves a child behind.
    """
    return await run_streaming(argv, stdin=stdin, timeout=timeout, env=env, cwd=cwd)


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


async def _pump(stream: asyncio.StreamReader | None, name: str, sink: bytearray, on_output: OnOutput | None) -> None:
    if stream is None:
        return
    while chunk := await stream.read(65536):
        sink += chunk
        if on_output is not None:
            on_output(name, chunk)


async def _communicate(
    proc: asyncio.subprocess.Process, stdin: bytes | None, on_output: OnOutput | None, out: bytearray, err: bytearray
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
) -> ProcResult:
    """:func:`run`, with each chunk of output also handed to ``on_output`` as it arrives."""
    argv = [str(a) for a in argv]
    start = time.monotonic()
    proc = await _spawn(argv, stdin, env, cwd)
    timed_out = False
    out, err = bytearray(), bytearray()
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
    return ProcResult(argv, code, bytes(out), bytes(err), time.monotonic() - start, timed_out)
