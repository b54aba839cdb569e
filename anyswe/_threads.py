"""Blocking calls that run alongside many others (an agent's loop, a lock held by another process, a
docker save, a runtime's client call per sandbox), each on a thread of its own.

``asyncio.to_thread`` shares the loop's default pool of min(32, cores + 4) threads (6 on 2 cores).
An agent loop holds its thread for the whole agent run, and a wave of sandbox starts holds one per
`docker run`. With more of those than threads, the others wait for a free thread while their
sandboxes sit idle and their timeouts run, and so does every short call (the driver's recording of
a row) behind them. The driver's own short calls keep ``to_thread``; the rest comes here.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


async def in_thread(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` on a new daemon thread; cancelling the await leaves the thread to finish."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)

    def settle(outcome: Callable[[], None]) -> None:
        if not future.done():
            outcome()

    def work() -> None:
        try:
            result = call()
        except BaseException as exc:  # handed to the awaiting task
            error = exc
            with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits any more
                loop.call_soon_threadsafe(settle, lambda: future.set_exception(error))
        else:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(settle, lambda: future.set_result(result))

    threading.Thread(target=work, name=f"anyswe-{getattr(fn, '__name__', 'work')}", daemon=True).start()
    return await future
