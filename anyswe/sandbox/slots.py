"""Concurrency slots: at most N sandboxes of one provider alive at once, in every event loop.

A slot is taken before a sandbox starts and released exactly once when it is gone, whichever
path it took (start failed, stopped, cancelled). The semaphore belongs to one event loop; a
provider used from successive loops (``run_sync`` in Jupyter) gets a fresh one per loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator


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


class SharedBound:
    """A bound shared by several providers' work, each provider's own bound waited for *first*.

    Work comes a provider at a time (a matrix cell by cell, a triage's grades per backend): a job that
    took a place of the shared bound first and then waited for its busy provider kept the other
    providers' jobs out of that place, so they ran mostly one provider after the other. ``place``
    waits for a place in the provider's gate (as large as its concurrency, made on first use, keyed as
    the caller names the provider), then for one in the shared bound. ``per_provider=False`` (Ray,
    whose resources bound each provider type): the shared bound alone. The provider's :class:`Slots`
    still bound its sandboxes.
    """

    def __init__(self, size: int, *, per_provider: bool = True) -> None:
        self._shared = asyncio.Semaphore(size)
        self._gates: dict[str, asyncio.Semaphore] | None = {} if per_provider else None

    @contextlib.asynccontextmanager
    async def place(self, provider: str, concurrency: int) -> AsyncIterator[None]:
        if self._gates is None:
            async with self._shared:
                yield
            return
        if provider not in self._gates:
            self._gates[provider] = asyncio.Semaphore(concurrency)
        async with self._gates[provider], self._shared:
            yield
