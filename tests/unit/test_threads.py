"""Blocking calls that run alongside many others (agent loops, runtime calls per sandbox) do not queue
behind asyncio's default pool (6 threads on 2 cores): each gets a thread of its own. A barrier that
every call must reach together proves they run at the same time."""

from __future__ import annotations

import asyncio
import threading

import pytest

from anyswe._threads import in_thread

#: More than asyncio's default pool has threads on any machine of up to 16 cores.
MANY = 21


def _meet(barrier: threading.Barrier) -> int:
    return barrier.wait(timeout=60)  # BrokenBarrierError if they did not all run at once


def test_long_blocking_calls_each_get_a_thread() -> None:
    async def main() -> list[int]:
        barrier = threading.Barrier(MANY)
        return await asyncio.gather(*(in_thread(_meet, barrier) for _ in range(MANY)))

    assert sorted(asyncio.run(main())) == list(range(MANY))


def test_errors_reach_the_caller_and_a_cancelled_wait_leaves_the_thread_to_finish() -> None:
    finished = threading.Event()
    release = threading.Event()

    def fail() -> None:
        raise ValueError("inside")

    def slow() -> None:
        release.wait(60)
        finished.set()

    async def main() -> None:
        with pytest.raises(ValueError, match="inside"):
            await in_thread(fail)
        waiting = asyncio.ensure_future(in_thread(slow))
        await asyncio.sleep(0.05)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        release.set()
        await asyncio.to_thread(finished.wait, 60)

    asyncio.run(main())
    assert finished.is_set()
