"""Run a coroutine to completion from sync code, including inside Jupyter's running event loop."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` where no loop runs in this thread; otherwise run it on a worker thread.

    Jupyter already runs a loop in the main thread, where ``asyncio.run`` refuses to start; a fresh
    loop on a worker thread gives the same result without patching the running loop.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="anyswe-run") as pool:
        return pool.submit(asyncio.run, coro).result()
