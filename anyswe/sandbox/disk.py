"""A sandbox's disk limit where the runtime has none of its own: a watchdog on its writable layer.

An apptainer sandbox writes into its overlay image, whose size is its limit (writes past it fail
inside, with ENOSPC). A docker container writes into its writable layer on the host's disk, which
docker bounds only on some storage drivers (``--storage-opt size=``: overlay2 over xfs mounted with
``pquota``, btrfs, zfs, devicemapper; not overlay2 over ext4, the common case). Where it cannot,
:class:`DiskWatch` measures the layer (the bytes its files hold on the host) every so often, and once
it is past the limit has the provider kill the sandbox and keeps the evidence: the task's own doing,
:class:`~anyswe.errors.SandboxDiskFull`, never the host's. It measures at least once a second and no
more than one part in twenty of its time (a layer of many files takes longer to walk), so a sandbox
writing fast can pass its limit by what it writes in that time before it is stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Annotated

from pydantic import AfterValidator

from anyswe import _proc
from anyswe._threads import in_thread

_UNITS = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


def size_bytes(text: str) -> int:
    """``4g``, ``500m``, ``1.5G``, ``1048576`` -> bytes (docker's own size syntax, binary units)."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([bkmgt]?)b?\s*", text, re.IGNORECASE)
    if m is None:
        raise ValueError(f"{text!r} is not a size (e.g. 4g, 500m)")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def disk_size(value: str | None) -> str | None:
    """A config's disk size, checked (a ValueError is the spec's error at its field)."""
    if value is not None:
        size_bytes(value)
    return value


#: A config's disk limit (``providers.<name>.disk``): the same default as apptainer's overlay (4096 MB),
#: since a container's writable layer is on the host's disk itself.
DiskSize = Annotated[str | None, AfterValidator(disk_size)]


def used_bytes(root: str) -> int:
    """The bytes the files under ``root`` take on disk (allocated blocks, each inode once, this
    filesystem only, links not followed); what vanishes during the walk is not counted."""
    total, seen, stack = 0, set[tuple[int, int]](), [root]
    try:
        device = os.lstat(root).st_dev
    except OSError:
        return 0
    while stack:
        try:
            entries = os.scandir(stack.pop())
        except OSError:
            continue
        with entries:
            for entry in entries:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if st.st_dev != device or (st.st_dev, st.st_ino) in seen:
                    continue
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
    return total


@dataclass
class DiskWatch:
    """One sandbox's writable layer (``layer``, a host directory), held to ``limit`` bytes: past it,
    ``stop`` is called once and :attr:`evidence` says what was seen."""

    name: str
    layer: str
    limit: int
    stop: Callable[[], Awaitable[None]]
    evidence: str | None = None
    _task: asyncio.Task[None] | None = field(default=None, repr=False)

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            began = time.monotonic()
            used = await in_thread(used_bytes, self.layer)
            took = time.monotonic() - began
            if used > self.limit:
                self.evidence = (
                    f"its writes passed its disk limit of {_shown(self.limit)} ({_shown(used)} in its writable "
                    "layer: anyswe's watchdog stopped it)"
                )
                await self.stop()
                return
            await asyncio.sleep(max(1.0, 20 * took))

    async def close(self) -> None:
        """Stop watching (the sandbox is being removed)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task


def _shown(n: int) -> str:
    for unit in ("T", "G", "M", "K"):
        if n >= _UNITS[unit.lower()]:
            return f"{n / _UNITS[unit.lower()]:.1f}{unit}"
    return f"{n}B"


def plan_note(field: str, disk: str | None) -> str:
    """What the plan says of a docker provider's disk limit (``field``: where the spec sets it)."""
    if not disk:
        return f"{field} is null: its sandboxes may fill the host's disk"
    return (
        f"{field}: {disk} per sandbox, by docker's --storage-opt size where its storage driver takes one "
        "(overlay2 over xfs with pquota, btrfs, zfs), else by anyswe's watchdog on the writable layer: each "
        "task's agent.log says which"
    )


#: Storage drivers whose containers docker bounds with ``--storage-opt size=`` (overlay2 only over xfs
#: with ``pquota``: tried, and a refusal falls back to the watchdog).
SIZED_DRIVERS = frozenset({"btrfs", "zfs", "devicemapper", "windowsfilter"})


class DiskLimits:
    """A provider's disk limit per sandbox (``limit`` bytes; None: none) and how it is kept:
    ``storage-opt`` (the runtime's own), ``watchdog`` (a :class:`DiskWatch` per sandbox), or ``none``."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.mechanism: str | None = None if limit else "none"
        self._watches: dict[str, DiskWatch] = {}
        #: sandbox -> why it was stopped, kept past its watch (asked when it is found gone).
        self._exceeded: dict[str, str] = {}

    def choose(self, info: bytes) -> None:
        """The mechanism for a daemon by its storage driver and that driver's status (``docker info``'s
        ``{{json .Driver}}|{{json .DriverStatus}}``: the driver's filesystem is in it); unreadable: the watchdog."""
        driver, _, status = info.decode(errors="replace").strip().partition("|")
        try:
            name, backing = json.loads(driver), dict(json.loads(status) or []).get("Backing Filesystem", "")
        except (ValueError, TypeError):
            name = backing = ""
        sized = name in SIZED_DRIVERS or (name == "overlay2" and backing == "xfs")
        self.mechanism = "storage-opt" if sized else "watchdog"

    def refused(self) -> None:
        """The runtime refused its size option (overlay2 over xfs without pquota): the watchdog from now on."""
        self.mechanism = "watchdog"

    def note(self) -> str:
        """The limit and how it is kept, for the run's log."""
        if self.limit is None:
            return "no disk limit"
        how = {"storage-opt": "docker's --storage-opt size", "watchdog": "anyswe's watchdog on its writable layer"}
        return f"disk limit {_shown(self.limit)} per sandbox, by {how.get(self.mechanism or '', 'none chosen yet')}"

    def watch(self, name: str, layer: str | None, kill: list[str]) -> None:
        """Watch sandbox ``name``'s writable layer (a host directory) while it runs, if this is the
        watchdog's; past the limit, ``kill`` (the runtime's argv that ends it; its removal comes later)."""
        if self.mechanism != "watchdog" or self.limit is None or not layer or not os.path.isdir(layer):
            return  # no layer on this host (an engine elsewhere): nothing to measure

        async def stopped() -> None:
            if watch.evidence is not None:
                self._exceeded[name] = watch.evidence
            await _proc.run(kill, timeout=60)

        watch = DiskWatch(name, layer, self.limit, stopped)
        self._watches[name] = watch
        watch.start()

    def exceeded(self, name: str) -> str | None:
        return self._exceeded.get(name)

    async def forget(self, name: str) -> None:
        """Sandbox ``name`` is being removed: its watch ends (its evidence, if any, stays)."""
        if (watch := self._watches.pop(name, None)) is not None:
            await watch.close()
