"""Shared by the benchmarks: a throwaway spec around the sleeping agent, and timing helpers."""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # `bench.sleep_agent:SleepAgent` resolves from the checkout


def sleep_spec(
    work: Path, *, provider: str, tasks: int, seconds: float, concurrency: int, instance: str = "demo__calc-1"
) -> Path:
    """A spec of ``tasks`` samples of one demo instance, the sleeping agent, one provider."""
    spec: dict[str, Any] = {
        "name": f"bench-{provider}-{concurrency}",
        "dataset": {"name": "demo", "instance_ids": [instance]},
        "agents": {"sleep": {"type": "bench.sleep_agent:SleepAgent", "seconds": seconds}},
        # Two sandboxes per task in flight: one being removed in the background while the next starts.
        "providers": {provider: {"type": provider, "concurrency": 2 * max(concurrency, 1)}},
        "samples": tasks,
        "concurrency": concurrency,
        "output_dir": str(work / f"run-{provider}-{concurrency}-{time.monotonic_ns()}"),
    }
    path = work / f"spec-{provider}-{concurrency}.yaml"
    path.write_text(json.dumps(spec))
    return path


def run_spec(path: Path) -> tuple[float, list[dict[str, Any]]]:
    """Apply ``path`` in this process; (wall seconds, result rows)."""
    from anyswe import Experiment

    exp = Experiment.load(path)
    t = time.perf_counter()
    exp.run(progress=False)
    wall = time.perf_counter() - t
    rows = [json.loads(line) for line in (exp.run_dir / "results.jsonl").read_text().splitlines()]
    return wall, rows


def workdir() -> Path:
    return Path(tempfile.mkdtemp(prefix="anyswe-bench-"))
