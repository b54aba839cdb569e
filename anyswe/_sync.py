"""Run a coroutine to completion from sync code, including inside Jupyter's running event loop, and
the CLI's run that every stop signal ends the same way."""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

#: Besides Ctrl-C, what stops a CLI run gracefully: a scheduler's time limit or `docker stop`
#: (SIGTERM), a closed terminal (SIGHUP).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def run_stoppable(coro: Coroutine[Any, Any, T], received: list[int]) -> T:
    """``asyncio.run`` in the main thread, where Ctrl-C, SIGTERM and SIGHUP all stop the run alike:
    the first cancels it and waits for its teardown (sandboxes removed, finished results kept), then
    raises KeyboardInterrupt; a second raises KeyboardInterrupt at once (the forced exit). Each signal
    received is appended to ``received``.

    Not routed through SIGINT (asyncio's own Ctrl-C handling): a background job of a
    non-interactive shell (``anyswe apply ... &``) starts with SIGINT ignored, asyncio then installs
    no handler, and a SIGTERM raised as SIGINT did nothing at all. SIGINT keeps the disposition it
    came with: ignored stays ignored, as the shell meant (a terminal's Ctrl-C is not for background jobs).
    """
    signals = [*STOP_SIGNALS]
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signals.append(signal.SIGINT)
    with asyncio.Runner() as runner:
        loop = runner.get_loop()
        task = loop.create_task(coro)

        def stop(signum: int, frame: object) -> None:
            received.append(signum)
            if len(received) == 1 and not task.done():
                task.cancel()
                loop.call_soon_threadsafe(lambda: None)  # wakes a loop blocked in a long select()
                return
            raise KeyboardInterrupt

        previous = {s: signal.signal(s, stop) for s in signals}
        try:
            return loop.run_until_complete(task)
        except asyncio.CancelledError:
            if received:
                raise KeyboardInterrupt from None
            raise
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)


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


def settle_heap() -> None:
    """For anyswe's own long-running processes (apply, serve), once they are set up: what they hold by
    then (modules, classes, the plan) is moved out of the collector's way (``gc.freeze``), so a full
    collection, which a busy gateway's calls set off every few seconds, walks only what came after.
    Measured in bench/gateway_latency.py: it was the gateway's slowest calls (p99). Never in a library
    call: a notebook's kernel is its user's."""
    import gc

    gc.collect()
    gc.freeze()
