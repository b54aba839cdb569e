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
from collections.abc import Mapping, Sequence
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
    argv = [str(a) for a in argv]
    start = time.monotonic()
    try:
        proc = await asyncio.create_subprocess_exec(
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
    timed_out = False
    try:
        out, err = await asyncio.wait_for(proc.communicate(stdin), timeout)
    except TimeoutError:
        timed_out = True
        _kill_group(proc)
        out, err = await proc.communicate()
    except BaseException:
        _kill_group(proc)
        with contextlib.suppress(Exception):
            await asyncio.shield(proc.wait())
        raise
    # The group may hold stragglers that did not keep the pipes open.
    if timed_out:
        _kill_group(proc)
    assert proc.returncode is not None
    return ProcResult(argv, proc.returncode, out, err, time.monotonic() - start, timed_out)
