"""run_sync works with and without a running loop, and an interrupt cancels the work."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
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
    # Set here as ipykernel sets it: interrupt_main() does nothing while SIGINT is ignored or left to
    # the default, as a pytest-xdist worker may have it after other tests (in the unit tier's -n 2 run
    # this test once waited out the whole 60 s sleep).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    loop = asyncio.new_event_loop()
    start = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            loop.run_until_complete(cell())
    finally:
        loop.close()
        signal.signal(signal.SIGINT, previous)
    assert torn_down.is_set() and time.monotonic() - start < 10


#: A CLI-like process: run_stoppable over work that records its teardown; the exit code says how it ended.
STOPPABLE = """
import asyncio, signal, sys
from anyswe._sync import run_stoppable

async def work():
    print("started", flush=True)
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        await asyncio.sleep(float(sys.argv[1]))  # a teardown that takes a moment
        print("torn down", flush=True)
        raise

received = []
try:
    run_stoppable(work(), received)
except KeyboardInterrupt:
    print("stopped by", signal.Signals(received[-1]).name, flush=True)
    sys.exit(128 + received[-1])
"""


@pytest.mark.parametrize(
    ("sig", "sigint_ignored"),
    [(signal.SIGTERM, True), (signal.SIGTERM, False), (signal.SIGHUP, True), (signal.SIGINT, False)],
    ids=["SIGTERM-background-job", "SIGTERM", "SIGHUP-background-job", "SIGINT"],
)
def test_every_stop_signal_cancels_and_waits_for_teardown(sig: signal.Signals, sigint_ignored: bool) -> None:
    """A background job of a script starts with SIGINT ignored (``preexec_fn`` does the same here);
    SIGTERM and SIGHUP must stop it all the same, through the very path of Ctrl-C."""

    def ignore_sigint() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    proc = subprocess.Popen(
        [sys.executable, "-c", STOPPABLE, "0.2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=ignore_sigint if sigint_ignored else None,
    )
    assert proc.stdout is not None and proc.stdout.readline() == "started\n"
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, out) == (128 + sig, f"torn down\nstopped by {sig.name}\n"), err


def test_an_ignored_sigint_stays_ignored() -> None:
    """The shell ignored SIGINT for a background job (a terminal's Ctrl-C is not for it): so does the run."""
    proc = subprocess.Popen(
        [sys.executable, "-c", STOPPABLE, "0.2"],
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    assert proc.stdout is not None and proc.stdout.readline() == "started\n"
    proc.send_signal(signal.SIGINT)
    time.sleep(1)
    assert proc.poll() is None
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM


def test_a_second_signal_forces_the_exit_during_the_teardown() -> None:
    proc = subprocess.Popen([sys.executable, "-c", STOPPABLE, "60"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "started\n"
    proc.send_signal(signal.SIGTERM)
    time.sleep(1)  # into the minute-long teardown
    assert proc.poll() is None
    proc.send_signal(signal.SIGHUP)
    out, _ = proc.communicate(timeout=30)
    assert (proc.returncode, out) == (128 + signal.SIGHUP, "stopped by SIGHUP\n")
