"""Whether an apptainer instance still runs, read from its ``--pid-file`` and /proc: a live process,
an exited one (a zombie not yet reaped counts as exited), and a pid taken by another process later."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from anyswe.sandbox.apptainer import _process, _running


def test_a_live_process_runs_and_an_exited_one_does_not(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        pid_file = tmp_path / "instance.pid"
        pid_file.write_text(f"{child.pid}\n")
        process = _process(pid_file)
        assert process is not None and process[0] == child.pid and _running(process)
        child.kill()
        deadline = time.monotonic() + 30
        while _running(process) and time.monotonic() < deadline:  # a zombie until reaped: not running
            time.sleep(0.05)
        assert not _running(process)
    finally:
        child.kill()
        child.wait()
    assert not _running(process) and _process(pid_file) is None  # reaped: gone from /proc


def test_a_pid_now_held_by_another_process_is_not_the_instance(tmp_path: Path) -> None:
    me = _process(_write(tmp_path, os.getpid()))
    assert me is not None and _running(me)
    # Same pid, another start time: what a reused pid looks like.
    assert not _running((me[0], str(int(me[1]) + 1)))


def test_no_or_garbled_pid_file_means_unknown(tmp_path: Path) -> None:
    assert _process(tmp_path / "missing.pid") is None
    assert _process(_write(tmp_path, "not a pid")) is None


def _write(tmp_path: Path, content: object) -> Path:
    path = tmp_path / "instance.pid"
    path.write_text(f"{content}\n")
    return path
