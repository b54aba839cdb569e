"""A sandbox killed from outside while the tests run is an infra error, masked and run again, never an
"unresolved": the verdict of the task is the one of a run whose tests really finished."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from faultkit import sandboxes, strike

from anyswe.results.store import read_rows

pytestmark = pytest.mark.containers

# One task whose suite takes about ten seconds (demo__retry-7 sleeps on purpose): time to strike.
SPEC = """\
name: faults
dataset: {{name: demo, instance_ids: [demo__retry-7]}}
agents:
  gold: {{type: gold}}
providers:
  p: {{type: {provider}, concurrency: 1}}
retries: {{max_attempts: 2, backoff: 0.1}}
concurrency: 1
"""


def grader_running_eval(provider: str) -> str | None:
    """This session's grading sandbox, once its eval script runs (looked for inside the sandbox, so
    another session's evals on the same machine do not count)."""

    for name in sandboxes(provider, os.environ["ANYSWE_SESSION"], "grading"):
        inside = ["docker", "exec", name] if provider == "docker" else ["apptainer", "exec", f"instance://{name}"]
        if subprocess.run([*inside, "pgrep", "-f", "/bin/bash /eval.sh"], capture_output=True).returncode == 0:
            return name
    return None


@pytest.mark.parametrize(
    ("provider", "how"),
    [("docker", "docker-kill"), ("docker", "docker-stop"), ("apptainer", "apptainer-stop")],
)
def test_sandbox_killed_during_the_tests(runtimes: None, tmp_path: Path, provider: str, how: str) -> None:
    spec, out = tmp_path / "spec.yaml", tmp_path / "run"
    spec.write_text(SPEC.format(provider=provider))
    log = tmp_path / "apply.log"
    with open(log, "wb") as sink:  # a file, not a pipe nobody reads while the test polls
        proc = subprocess.Popen(
            [sys.executable, "-m", "anyswe", "apply", str(spec), "--out", str(out)], stdout=sink, stderr=sink
        )
    try:
        deadline = time.monotonic() + 300
        while (grader := grader_running_eval(provider)) is None:
            assert proc.poll() is None and time.monotonic() < deadline, "the eval script never started"
            time.sleep(0.2)
        time.sleep(1)  # the suite is under way
        strike(provider, grader, "kill" if how == "docker-kill" or provider == "apptainer" else "stop")
        proc.wait(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 0, log.read_text()
    first, second = read_rows(out / "results.jsonl")
    # The cut-short run is no verdict: an infra error naming the cause, masked.
    assert first["error_kind"] == "infra" and first["mask_sample"] and not first["resolved"], first
    cause = {
        "docker-kill": "was killed (SIGKILL",
        "docker-stop": "was stopped (SIGTERM)",
        "apptainer-stop": "no longer running",
    }
    assert "died during the eval script" in first["error"] and cause[how] in first["error"], first["error"]
    # Run again within the same apply (retries.max_attempts), the gold patch resolves.
    assert second["attempt"] == 2 and second["resolved"] and second["error_kind"] is None, second
