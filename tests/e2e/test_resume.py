"""A run killed part-way and applied again finishes only what was missing, with no duplicates."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from anyswe.results.store import read_rows

pytestmark = pytest.mark.containers

SPEC = """\
name: resume
dataset: {name: demo}
agents:
  gold: {type: gold}
providers:
  docker: {type: docker, concurrency: 2}
concurrency: 2
"""


def start(spec: Path, out: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "anyswe", "apply", str(spec), "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def wait_for_rows(path: Path, n: int, proc: subprocess.Popen[bytes], limit: float = 300) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if len(read_rows(path)) >= n:
            return
        if proc.poll() is not None:
            raise AssertionError(f"apply exited early: {proc.stdout.read().decode() if proc.stdout else ''}")
        time.sleep(0.2)
    raise AssertionError(f"fewer than {n} results after {limit}s")


def docker_leftovers() -> list[str]:
    """This test session's containers (the subprocesses inherit ANYSWE_SESSION)."""
    label = f"label=anyswe.session={os.environ['ANYSWE_SESSION']}"
    out = subprocess.run(["docker", "ps", "-aq", "--filter", label], capture_output=True, text=True, check=True)
    return out.stdout.split()


def finish_and_check(spec: Path, out: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "anyswe", "apply", str(spec), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    rows = read_rows(out / "results.jsonl")
    keys = [row["key"] for row in rows]
    assert len(keys) == len(set(keys)) == 8, keys
    assert all(row["resolved"] for row in rows)


def test_sigkill_then_reapply(runtimes: None, tmp_path: Path) -> None:
    spec, out = tmp_path / "spec.yaml", tmp_path / "run"
    spec.write_text(SPEC)
    proc = start(spec, out)
    wait_for_rows(out / "results.jsonl", 2, proc)
    os.killpg(proc.pid, signal.SIGKILL)  # a crash: no teardown runs
    proc.wait()
    done_before = {r["key"] for r in read_rows(out / "results.jsonl")}
    assert 2 <= len(done_before) < 8
    # The crash leaves the containers of the tasks in flight (their owner is dead now): the next
    # apply of the run collects them before it starts.
    orphans = docker_leftovers()
    finish_and_check(spec, out)
    assert done_before <= {r["key"] for r in read_rows(out / "results.jsonl")}
    assert docker_leftovers() == [], f"left by the crash: {orphans}"
    session = os.environ["ANYSWE_SESSION"]
    r = subprocess.run(
        [sys.executable, "-m", "anyswe", "gc", "--session", session], capture_output=True, text=True, check=True
    )
    assert "0 leftover sandbox(es) removed" in r.stdout


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupt_tears_down_and_keeps_results(runtimes: None, tmp_path: Path, sig: signal.Signals) -> None:
    """Ctrl-C, or a scheduler's SIGTERM, sent to the whole process group as a terminal or a job killer does."""
    spec, out = tmp_path / "spec.yaml", tmp_path / "run"
    spec.write_text(SPEC)
    proc = start(spec, out)
    wait_for_rows(out / "results.jsonl", 1, proc)
    os.killpg(proc.pid, sig)
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, output.decode()
    assert f"interrupted ({sig.name})".encode() in output
    assert b"apply again to resume" in output
    assert b"pending" in output  # the status table of what finished
    assert docker_leftovers() == []  # running sandboxes were torn down
    kept = len(read_rows(out / "results.jsonl"))
    assert 1 <= kept < 8
    finish_and_check(spec, out)


def test_sigterm_stops_a_background_job_of_a_script(runtimes: None, tmp_path: Path) -> None:
    """`anyswe apply ... &` in a non-interactive script: bash starts the job with SIGINT ignored. A
    SIGTERM (a scheduler, `kill %1`) must still stop it the way Ctrl-C does; it used to be raised as
    SIGINT inside, which the job ignores, so the apply ran on to the end."""
    spec, out, pid_file = tmp_path / "spec.yaml", tmp_path / "run", tmp_path / "apply.pid"
    spec.write_text(SPEC)
    argv = [sys.executable, "-m", "anyswe", "apply", str(spec), "--out", str(out)]
    script = f"{shlex.join(argv)} &\necho $! > {shlex.quote(str(pid_file))}\nwait $!\n"
    proc = subprocess.Popen(
        ["bash", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    wait_for_rows(out / "results.jsonl", 1, proc)
    pid = int(pid_file.read_text())
    # The case modelled is real: the job ignores SIGINT (bit 2 of SigIgn in /proc/PID/status).
    ignored = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("SigIgn"))
    assert int(ignored.split()[1], 16) & (1 << (signal.SIGINT - 1)), ignored
    os.kill(pid, signal.SIGTERM)  # the job alone, as a scheduler or `kill` does
    sent = time.monotonic()
    output, _ = proc.communicate(timeout=120)
    assert time.monotonic() - sent < 90, "the apply took too long to stop"
    assert proc.returncode == 128 + signal.SIGTERM, output.decode()  # bash's `wait` passes the job's code on
    assert b"interrupted (SIGTERM)" in output and b"apply again to resume" in output
    assert docker_leftovers() == []  # running sandboxes were torn down
    assert 1 <= len(read_rows(out / "results.jsonl")) < 8
    finish_and_check(spec, out)
