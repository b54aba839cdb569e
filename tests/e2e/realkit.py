"""What the real-image tiers share: an instance's eval run by hand with plain docker (swebench's
procedure, or a benchmark's own), and ``anyswe apply`` run as a user runs it."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from anyswe.datasets.instance import Instance
from anyswe.grading import swebench as sb
from anyswe.results.schema import TaskResult
from anyswe.results.store import read_results

EVAL_TIMEOUT = 1800
ANYSWE = [sys.executable, "-m", "anyswe"]


@dataclass
class ByHandRun:
    """One eval run by hand: what was applied, the eval script's whole output, how long it took."""

    patch: str
    applied: bool
    apply_output: str
    output: str
    seconds: float


def docker(*argv: str, stdin: str | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *argv], input=stdin, capture_output=True, text=True, timeout=timeout, check=False)


def run_by_hand(
    image: str, instance: Instance, patch: str, script: Callable[[Instance], str] = sb.eval_script
) -> ByHandRun:
    """swebench's procedure with plain docker: a fresh container, the patch by `git apply -v` (none if
    empty), swebench's eval script by `/bin/bash /eval.sh` with stdout and stderr together."""
    started = docker("run", "-d", "--network", "none", "--entrypoint", "sleep", image, "infinity")
    assert started.returncode == 0, started.stderr
    container = started.stdout.strip()
    try:
        applied, apply_output = True, ""
        if patch:
            put = docker("exec", "-i", container, "/bin/bash", "-c", "cat > /tmp/patch.diff", stdin=patch)
            assert put.returncode == 0, put.stderr
            r = docker("exec", "-w", "/testbed", container, "git", "apply", "-v", "/tmp/patch.diff")
            applied, apply_output = r.returncode == 0, r.stdout + r.stderr
        text = script(instance)
        put = docker("exec", "-i", container, "/bin/bash", "-c", "cat > /eval.sh", stdin=text)
        assert put.returncode == 0, put.stderr
        t0 = time.monotonic()
        with tempfile.TemporaryFile("w+") as out:
            subprocess.run(
                ["docker", "exec", container, "/bin/bash", "/eval.sh"],
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=EVAL_TIMEOUT,
                check=False,
            )
            seconds = time.monotonic() - t0
            out.seek(0)
            output = out.read()
        return ByHandRun(patch, applied, apply_output, output, seconds)
    finally:
        docker("rm", "-f", container)


def apply_spec(spec: Path, run_dir: Path) -> dict[tuple[str, str, str], TaskResult]:
    """``anyswe apply`` as a user runs it; (agent, provider, instance_id) -> the row of its one attempt."""
    r = subprocess.run(
        [*ANYSWE, "apply", str(spec), "--out", str(run_dir)], capture_output=True, text=True, timeout=5400
    )
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    rows = read_results(run_dir / "results.jsonl")
    found = {(row.agent, row.provider, row.instance_id): row for row in rows}
    assert len(found) == len(rows), "no task ran twice (the spec allows one attempt)"
    return found
