"""A sandbox's memory limit, seen from the host: its PID 1 kept out of the OOM killer's choice, and
the evidence that a sandbox which died was ended by its own memory limit (the task's doing, like a
full pids limit), not by the runtime or the host.

PID 1 (anyswe's helper) gets the lowest ``oom_score_adj`` (-1000, never chosen) from the host, which
alone may lower it. Root inside may still raise it (the kernel lets any writer of
``/proc/1/oom_score_adj`` raise it, and root's ``CAP_DAC_OVERRIDE`` passes its mode; no runtime
option masks that file), so a task can make PID 1 the victim of its own memory limit: such a death
is then told by the limit's OOM events, and is the agent's failure (``SandboxOutOfMemory``).

Docker records the events itself (``OOMKilled``). An apptainer instance's cgroup is removed as soon as
the instance ends, its counters with it, so :class:`OomWatch` registers for the cgroup's OOM
notifications (cgroup v1: an eventfd through ``cgroup.event_control``) when the sandbox starts and
counts them when it is found gone.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

#: The lowest ``oom_score_adj``: the OOM killer never chooses the process.
OOM_SCORE_ADJ_MIN = -1000
#: A threshold on the cgroup's usage that is never crossed: only the cgroup's removal signals it.
_NEVER = 1 << 62


def protect_init(pid: int) -> bool:
    """Give ``pid`` (a sandbox's PID 1, a host pid) the lowest ``oom_score_adj``; whether that could
    be done (it needs CAP_SYS_RESOURCE on the host: a rootless runtime's user cannot)."""
    try:
        Path(f"/proc/{pid}/oom_score_adj").write_text(str(OOM_SCORE_ADJ_MIN))
        return True
    except OSError:
        return False


def memory_cgroup(pid: int) -> Path | None:
    """The directory of ``pid``'s memory cgroup (cgroup v1's memory hierarchy, or the v2 one)."""
    from anyswe.sandbox.reap import cgroup_of

    return cgroup_of(pid, "memory")


def _eventfd(cgroup: Path, control: str, args: str = "") -> int:
    """An eventfd signalled on ``control``'s events in ``cgroup`` (and once on its removal)."""
    efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
    try:
        fd = os.open(cgroup / control, os.O_RDONLY | os.O_CLOEXEC)
        try:
            (cgroup / "cgroup.event_control").write_text(f"{efd} {fd}{args}")
        finally:
            os.close(fd)
    except BaseException:
        os.close(efd)
        raise
    return efd


def _take(efd: int) -> int:
    try:
        return os.eventfd_read(efd)
    except BlockingIOError:
        return 0


class OomWatch:
    """The OOM events of one sandbox's memory cgroup, counted from its start to after its end.

    cgroup v1: the kernel signals an eventfd registered on ``memory.oom_control`` once per OOM of
    the cgroup (before its victim is killed), and once more when the cgroup is removed; a second
    eventfd, on a usage threshold never crossed, is signalled by the removal alone, which tells the
    two apart. cgroup v2 has no such registration: ``memory.events`` is read while the cgroup is
    still there (an instance's cgroup outlives it by a moment, not always).
    """

    def __init__(
        self, cgroup: Path, oom_fd: int | None = None, removal_fd: int | None = None, limit: str | None = None
    ) -> None:
        self.cgroup, self.limit = cgroup, limit
        self._oom_fd, self._removal_fd = oom_fd, removal_fd
        #: What the eventfds said so far: the OOM one's signals (every OOM, and the removal once),
        #: and the removal one's (the removal alone); cgroup v2: the last ``oom`` count read.
        self._signals = 0
        self._removed = 0

    @classmethod
    def of(cls, pid: int, limit: str | None = None) -> OomWatch | None:
        """A watch on the memory cgroup of ``pid`` (a sandbox's PID 1, whose memory limit is
        ``limit``, for the evidence); None when none can be had."""
        cgroup = memory_cgroup(pid)
        if cgroup is None or not cgroup.is_dir():
            return None
        if not (cgroup / "cgroup.event_control").exists():  # cgroup v2
            return cls(cgroup, limit=limit) if (cgroup / "memory.events").exists() else None
        try:
            oom_fd = _eventfd(cgroup, "memory.oom_control")
        except OSError:
            return None
        try:
            removal_fd = _eventfd(cgroup, "memory.usage_in_bytes", f" {_NEVER}")
        except OSError:
            os.close(oom_fd)
            return None
        return cls(cgroup, oom_fd, removal_fd, limit)

    def count(self, wait: float = 2.0) -> int:
        """How many times the cgroup's limit ran out of memory (each an OOM kill inside it). Asked
        once the sandbox is gone, when the cgroup's removal may be under way: it waits up to ``wait``
        seconds for the removal's signal, which tells the OOMs' apart."""
        if self._oom_fd is None or self._removal_fd is None:
            with contextlib.suppress(OSError, ValueError):
                for line in (self.cgroup / "memory.events").read_text().splitlines():
                    key, _, value = line.partition(" ")
                    if key == "oom":
                        self._signals = max(self._signals, int(value))
            return self._signals
        deadline = time.monotonic() + wait
        settled: float | None = None
        while True:
            self._signals += _take(self._oom_fd)
            self._removed += _take(self._removal_fd)
            # Read before the look at the directory: the removal is signalled after its rmdir, so a
            # cgroup still there means that no removal is among what was read.
            if not self._removed and self.cgroup.is_dir():
                return self._signals
            if self._removed and self._signals >= 2:
                return self._signals - 1
            now = time.monotonic()
            if self._removed and settled is None:
                settled = now + 0.25  # both eventfds are signalled by the one removal, together
            if now >= deadline or (settled is not None and now >= settled):
                return max(0, self._signals - (1 if self._removed else 0))
            time.sleep(0.02)

    def evidence(self) -> str | None:
        """What the row's error says of an OOM that ended the sandbox; None when there was none."""
        if not (ooms := self.count()):
            return None
        limit = f" of {self.limit}" if self.limit else ""
        return f"its own memory limit{limit} ran out ({ooms} OOM event(s) in its memory cgroup, {self.cgroup})"

    def close(self) -> None:
        for fd in (self._oom_fd, self._removal_fd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._oom_fd = self._removal_fd = None
