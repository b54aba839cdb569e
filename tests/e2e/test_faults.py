"""A sandbox killed from outside while the tests run is an infra error, masked and run again, never an
"unresolved": the verdict of the task is the one of a run whose tests really finished."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

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


def eval_running() -> bool:
    """Whether an eval script runs now (processes in containers and instances are visible from the host)."""
    r = subprocess.run(["pgrep", "-f", "/bin/bash /eval.sh"], capture_output=True)
    return r.returncode == 0


def strike(how: str) -> None:
    """Kill, stop or remove the one running sandbox of this test session, as an OOM killer or an operator would."""
    session = os.environ["ANYSWE_SESSION"]
    if how.startswith("docker"):
        label = f"label=anyswe.session={session}"
        ids = subprocess.run(
            ["docker", "ps", "-q", "--filter", label], capture_output=True, text=True, check=True
        ).stdout.split()
        assert len(ids) == 1, ids
        subprocess.run(["docker", how.removeprefix("docker-"), ids[0]], capture_output=True, check=True)
        return
    listing = json.loads(
        subprocess.run(["apptainer", "instance", "list", "--json"], capture_output=True, text=True, check=True).stdout
    )
    names = [i["instance"] for i in listing["instances"] if i["instance"].startswith("anyswe-")]
    mine = [n for n in names if session in _apptainer_labels(n)]
    assert len(mine) == 1, names
    subprocess.run(["apptainer", "instance", "stop", "--force", mine[0]], capture_output=True, check=True)


def _apptainer_labels(name: str) -> str:
    from anyswe.sandbox import get_provider

    labels_file = get_provider("apptainer").config.state_dir / name / "labels.json"
    return labels_file.read_text() if labels_file.is_file() else ""


@pytest.mark.parametrize(
    ("provider", "how"),
    [("docker", "docker-kill"), ("docker", "docker-stop"), ("apptainer", "apptainer-stop")],
)
def test_sandbox_killed_during_the_tests(runtimes: None, tmp_path: Path, provider: str, how: str) -> None:
    spec, out = tmp_path / "spec.yaml", tmp_path / "run"
    spec.write_text(SPEC.format(provider=provider))
    proc = subprocess.Popen(
        [sys.executable, "-m", "anyswe", "apply", str(spec), "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 300
        while not eval_running():
            assert proc.poll() is None and time.monotonic() < deadline, "the eval script never started"
            time.sleep(0.1)
        time.sleep(1)  # the suite is under way
        strike(how)
        output, _ = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 0, output.decode()
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
