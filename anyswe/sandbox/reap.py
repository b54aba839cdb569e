"""Ending, from the host, every process a task left in its sandbox: all but the sandbox's PID 1.

An agent's commands run in a process group that the helper kills at a timeout, but a process can
leave its group (``setsid``, a daemon, a fork bomb). Left running after the agent's phase, it could
change the repository while the patch is captured or hold every pid of the sandbox, so that no
command of anyswe's could start and the agent's failure would look like the runtime's.

The processes are found through ``/proc``: those in the PID namespace of the sandbox's PID 1, and
their descendants (a namespace nested inside). Each is opened as a pidfd and checked again before it
is signalled, so a pid reused meanwhile by a host process is never hit; nothing in the host's own
PID namespace is ever signalled. They are stopped (SIGSTOP) pass after pass until a pass finds every
one stopped, since a stopped process forks no more, and then killed (SIGKILL).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from anyswe._threads import in_thread
from anyswe.errors import AnysweError, SandboxExecError, SandboxPidsExhausted

if TYPE_CHECKING:
    from anyswe import _proc
    from anyswe.sandbox.base import Sandbox

#: Bound on the stop passes: a fork bomb capped by the sandbox's pids limit is stopped in a few.
MAX_PASSES = 200
#: A sandbox whose processes fill this share of its pids limit is full: a fork bomb's count moves
#: just under the limit as its processes exit and fork.
FULL_SHARE = 0.95
#: Seconds a sandbox's pids cgroup is watched for refused forks before it is called not full: a fork
#: bomb on apptainer fell to 60% of its limit for half a second, refusing nothing, before it grew back.
WINDOW = 1.0


def pid_namespace(pid: int | str) -> str | None:
    """The PID namespace of a process (``pid:[inode]``), or None when it is gone (or a zombie)."""
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def _processes() -> dict[int, tuple[int, str]]:
    """Every live process -> (its parent, its state letter); zombies left out."""
    out: dict[int, tuple[int, str]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as fh:
                    state, parent = fh.read().rsplit(b")", 1)[1].split()[:2]
            except (OSError, ValueError):
                continue
            if state not in (b"Z", b"X"):
                out[int(entry)] = (int(parent), state.decode())
    return out


def members(init: int) -> dict[int, tuple[str, str]]:
    """The live processes of ``init``'s sandbox but ``init`` itself -> (PID namespace, state letter)."""
    ns = pid_namespace(init)
    host = pid_namespace("self")
    if ns is None or ns == host:  # no namespace of its own: nothing could be told apart from the host
        return {}
    procs = _processes()
    found = {pid: (ns, state) for pid, (_, state) in procs.items() if pid != init and pid_namespace(pid) == ns}
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in procs.items():
        children.setdefault(parent, []).append(pid)
    todo = list(found)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found and child != init and (child_ns := pid_namespace(child)) not in (None, host):
                found[child] = (child_ns, procs[child][1])
                todo.append(child)
    return found


def _signal(pid: int, ns: str, sig: signal.Signals) -> bool:
    """Send ``sig`` to ``pid`` if it is still the process found in namespace ``ns``."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return False  # gone
    try:
        # Checked after the pidfd is open: if it is the same process now, the pidfd is that process.
        if pid_namespace(pid) != ns:
            return False
        signal.pidfd_send_signal(fd, sig)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def end_all_but_init(init: int) -> int:
    """Stop, then kill, every process of ``init``'s sandbox but ``init``; how many were killed.

    Told apart by their state, not their pid: processes come and go (a fork bomb's exit as fast as
    they fork) and the host reuses their pids.
    """
    for _ in range(MAX_PASSES):
        running = [(pid, ns) for pid, (ns, state) in members(init).items() if state not in ("T", "t")]
        if not running:
            break
        for pid, ns in running:
            _signal(pid, ns, signal.SIGSTOP)
    killed: set[int] = set()
    for _ in range(MAX_PASSES):
        left = members(init)
        if not left:
            break
        killed.update(pid for pid, (ns, _) in left.items() if _signal(pid, ns, signal.SIGKILL))
        time.sleep(0.02)  # a killed process is a zombie (left out) a moment later
    return len(killed)


async def end_strays(sandbox: Sandbox[Any]) -> int | None:
    """Kill every process in ``sandbox`` but its PID 1, from the host: how many, or None when its
    runtime cannot tell the sandbox's processes apart here (a remote engine, a plugged provider)."""
    pid = await sandbox.provider.init_pid(sandbox.name)
    return None if pid is None else await in_thread(end_all_but_init, pid)


def cgroup_of(pid: int, controller: str) -> Path | None:
    """The directory of ``pid``'s cgroup for ``controller`` (cgroup v1, or the v2 hierarchy)."""
    root = Path("/sys/fs/cgroup")
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return root / controller / path.lstrip("/")
    unified = next((line.split(":", 2)[2] for line in lines if line.startswith("0::")), None)
    return None if unified is None else root / unified.lstrip("/")


def at_pids_limit(init: int, window: float = WINDOW) -> bool:
    """Whether the processes of ``init``'s sandbox fill its pids limit (its cgroup's): their count at
    :data:`FULL_SHARE` of it, or forks refused by it while it is watched for ``window`` seconds. A
    fork bomb's count swings below the limit as its processes fail to fork and exit (a CI run saw it
    under the share at the one moment it was read, and the bomb's failure would have been infra);
    forks being refused while it is watched say the limit is full whatever the count is at any one
    moment. Only a command that failed asks, so the window costs nothing on the way that works."""
    cgroup = cgroup_of(init, "pids")
    if cgroup is None:
        return False
    try:
        limit = (cgroup / "pids.max").read_text().strip()
        if limit == "max":
            return False
        refused = _refused(cgroup)
        deadline = time.monotonic() + window
        while True:
            if int((cgroup / "pids.current").read_text()) >= FULL_SHARE * int(limit) or _refused(cgroup) > refused:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
    except (OSError, ValueError):
        return False


def _refused(cgroup: Path) -> int:
    """The forks the cgroup's pids limit has refused so far (pids.events' ``max``)."""
    for line in (cgroup / "pids.events").read_text().splitlines():
        key, _, value = line.partition(" ")
        if key == "max":
            return int(value)
    return 0


async def runtime_failure(sandbox: Sandbox[Any], result: _proc.ProcResult) -> AnysweError:
    """The error for a command the runtime could not run in ``sandbox``: the runtime's
    (:class:`SandboxExecError`, infra), unless the sandbox's own processes fill its pids limit, or
    one of its own limits ended it (its memory, its disk: the task's doing)."""
    provider = sandbox.provider
    what = f"{provider.name} could not run a command in sandbox {sandbox.name}"
    pid = await provider.init_pid(sandbox.name)
    if pid is not None and await in_thread(at_pids_limit, pid):
        return SandboxPidsExhausted(f"{what}: its own processes fill its pids limit")
    if pid is None and (gone := await provider.gone_reason(sandbox.name)) is not None:
        if (own := await provider.over_limit(sandbox.name)) is not None:
            made: AnysweError = type(own)(f"{what}: it died: {own}")
            return made
        return SandboxExecError.from_proc(f"{what}: {gone}", result)
    return SandboxExecError.from_proc(what, result)


def in_cgroup_of(pid: int, container_id: str) -> bool:
    """Whether host process ``pid`` runs in the cgroup of container ``container_id``."""
    try:
        return container_id in Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return False
