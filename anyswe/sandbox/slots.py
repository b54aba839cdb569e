"""Concurrency slots: at most N sandboxes of one provider alive at once, in every event loop.

A slot is taken before a sandbox starts and released exactly once when it is gone, whichever
path it took (start failed, stopped, cancelled). The semaphore belongs to one event loop; a
provider used from successive loops (``run_sync`` in Jupyter) gets a fresh one per loop.
"""

from __future__ import annotations

import asyncio
import weakref


class Slot:
    """One taken slot; :meth:`release` is idempotent."""

    def __init__(self, semaphore: asyncio.Semaphore) -> None:
        self._semaphore: asyncio.Semaphore | None = semaphore

    def release(self) -> None:
        if self._semaphore is not None:
            self._semaphore.release()
            self._semaphore = None


class Slots:
    """``await slots.take()`` waits for a free slot and returns it."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )

    def _semaphore(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        sem = self._by_loop.get(loop)
        if sem is None:
            sem = self._by_loop[loop] = asyncio.Semaphore(self.size)
        return sem

    async def take(self) -> Slot:
        sem = self._semaphore()
        await sem.acquire()
        return Slot(sem)


class ProviderGates:
    """Each provider's own bound, to wait for *before* a bound shared by several providers.

    Work comes a provider at a time (a matrix cell by cell, a triage's grades per backend): a job that
    took a place of the shared bound first and then waited for its busy provider kept the other
    providers' jobs out of that place, so their sandboxes ran mostly one provider after the other. A
    gate per provider (named as the spec names it), as large as that provider's concurrency, made on
    first use in the running event loop. The provider's :class:`Slots` still bound its sandboxes.
    """

    def __init__(self) -> None:
        self._gates: dict[str, asyncio.Semaphore] = {}

    def gate(self, provider: str, concurrency: int) -> asyncio.Semaphore:
        if provider not in self._gates:
            self._gates[provider] = asyncio.Semaphore(concurrency)
        return self._gates[provider]
