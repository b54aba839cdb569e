"""Run a coroutine to completion from sync code, including inside Jupyter's running event loop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` where no loop runs in this thread; otherwise run it on a worker thread.

    Jupyter already runs a loop in the main thread, where ``asyncio.run`` refuses to start; a fresh
    loop on a worker thread gives the same result without patching the running loop. Interrupting
    the kernel (KeyboardInterrupt in the waiting thread) cancels the coroutine and waits for its
    teardown, exactly like Ctrl-C under ``asyncio.run``.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)

    loop = asyncio.new_event_loop()
    task = loop.create_task(coro)
    outcome: dict[str, Any] = {}
    # An Event, not Thread.join: a join interrupted by KeyboardInterrupt can mark a live thread as
    # stopped (CPython's tstate-lock handling), and the teardown would then not be waited for.
    done = threading.Event()

    def worker() -> None:
        asyncio.set_event_loop(loop)
        try:
            outcome["value"] = loop.run_until_complete(task)
        except BaseException as exc:  # re-raised in the caller's thread
            outcome["error"] = exc
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()
            done.set()

    thread = threading.Thread(target=worker, name="anyswe-run", daemon=True)
    thread.start()
    try:
        while not done.wait(0.2):
            pass
    except KeyboardInterrupt:
        loop.call_soon_threadsafe(task.cancel)
        done.wait()
        raise
    if "error" in outcome:
        raise outcome["error"]
    result: T = outcome["value"]
    return result
