"""run_sync works with and without a running loop, and an interrupt cancels the work."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from anyswe._sync import run_sync


async def answer() -> int:
    await asyncio.sleep(0.01)
    return 42


def test_without_a_loop() -> None:
    assert run_sync(answer()) == 42


def test_inside_a_running_loop_like_jupyter() -> None:
    async def cell() -> int:
        return run_sync(answer())

    assert asyncio.run(cell()) == 42


def test_errors_propagate_inside_a_loop() -> None:
    async def boom() -> None:
        raise ValueError("bad")

    async def cell() -> None:
        run_sync(boom())

    with pytest.raises(ValueError, match="bad"):
        asyncio.run(cell())


def test_interrupt_cancels_and_waits_for_teardown() -> None:
    torn_down = threading.Event()
    started = threading.Event()

    async def long() -> None:
        try:
            started.set()
            await asyncio.sleep(60)
        finally:
            await asyncio.sleep(0.1)  # teardown that itself awaits
            torn_down.set()

    async def cell() -> None:
        main = threading.get_ident()

        def interrupt() -> None:
            started.wait(5)
            time.sleep(0.2)
            import _thread

            assert threading.get_ident() != main
            _thread.interrupt_main()

        threading.Thread(target=interrupt).start()
        run_sync(long())

    # Like ipykernel: a loop runs the cell and SIGINT raises KeyboardInterrupt in the main thread
    # (asyncio.run would install its own handler that cancels instead).
    loop = asyncio.new_event_loop()
    start = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            loop.run_until_complete(cell())
    finally:
        loop.close()
    assert torn_down.is_set() and time.monotonic() - start < 10
