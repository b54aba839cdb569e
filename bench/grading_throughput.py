"""Benchmark: grading throughput per core on the real-image tier, against swebench's own harness.

The 7 SWE-bench Verified instances of ``specs/real_images.yaml`` (images built here offline, with
swebench's official names: ``anyswe prepare images specs/real_images.yaml --build --repo-mirror
../shared/swebench/repos``), their gold patches, images cached. In each round, alternating:

* anyswe: ``anyswe apply`` of a gold-only spec on one provider at concurrency ``c`` (a whole process,
  as a user runs it); its verdicts, and the mean of each phase of its rows;
* swebench: ``python -m swebench.harness.run_evaluation`` with ``--predictions_path gold``,
  ``--namespace swebench`` (the same local images, none pulled or built) and ``--max_workers c``.
  swebench runs on docker only, so an apptainer figure is set beside the docker anchor.

Printed: wall seconds (median of the rounds), instances per core-hour (instances x 3600 / wall /
cores), the ratio anyswe / swebench, and whether the verdicts agree. Figures, never asserts.

    uv run python bench/grading_throughput.py [--provider docker --provider apptainer] [--concurrency 2] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _common import SHARED, apply_process, median_phases, phase_means, phases_line, real_ids, real_spec, workdir


def anyswe_round(
    work: Path, provider: str, concurrency: int, ids: list[str]
) -> tuple[float, dict[str, bool], dict[str, float]]:
    """``anyswe apply`` of gold on ``provider``: (wall, instance -> resolved, phase -> mean seconds)."""
    wall, rows = apply_process(*real_spec(work, provider, concurrency, ids))
    return wall, {r["instance_id"]: bool(r["resolved"]) for r in rows}, phase_means(rows)


def swebench_round(work: Path, concurrency: int, ids: list[str]) -> tuple[float, dict[str, bool]]:
    """swebench's ``run_evaluation`` of gold on the same images: (wall, instance -> resolved)."""
    run_id = f"bench{time.monotonic_ns()}"
    argv = [
        sys.executable, "-m", "swebench.harness.run_evaluation",
        "--dataset_name", str(SHARED / "verified.jsonl"), "--predictions_path", "gold",
        "--namespace", "swebench", "--max_workers", str(concurrency), "--run_id", run_id,
        "--cache_level", "instance", "--instance_ids", *ids,
    ]  # fmt: skip
    t = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True, cwd=work)
    wall = time.perf_counter() - t
    report = json.loads((work / f"gold.{run_id}.json").read_text())
    resolved = set(report["resolved_ids"])
    return wall, {i: i in resolved for i in ids}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--provider", action="append", choices=["docker", "apptainer"])
    ap.add_argument("--concurrency", type=int, action="append")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    providers = args.provider or ["docker", "apptainer"]
    levels = args.concurrency or [2]
    ids, cores, work = real_ids(), os.cpu_count() or 1, workdir()
    print(f"{len(ids)} instances, gold, images cached, {cores} cores, {args.rounds} rounds (median)")
    for c in levels:
        walls: dict[str, list[float]] = {p: [] for p in [*providers, "swebench"]}
        phases: dict[str, list[dict[str, float]]] = {p: [] for p in providers}
        agree: dict[str, bool] = {}
        anchor: dict[str, bool] = {}
        for _ in range(args.rounds):
            wall, anchor = swebench_round(work, c, ids)
            walls["swebench"].append(wall)
            for p in providers:
                wall, verdicts, ph = anyswe_round(work, p, c, ids)
                walls[p].append(wall)
                phases[p].append(ph)
                agree[p] = agree.get(p, True) and verdicts == anchor
        base = statistics.median(walls["swebench"])
        rate = len(ids) * 3600 / base / cores
        print(
            f"\nconcurrency {c}: swebench run_evaluation (docker) {base:.1f} s, {rate:.0f} instances/core-hour, ",
            end="",
        )
        print(f"resolved {sum(anchor.values())}/{len(ids)}")
        for p in providers:
            wall = statistics.median(walls[p])
            per = median_phases(phases[p])
            print(
                f"anyswe {p}: {wall:.1f} s, {len(ids) * 3600 / wall / cores:.0f} instances/core-hour, "
                f"{wall / base:.2f}x swebench; verdicts equal to swebench's in every round: {agree[p]}"
            )
            print(f"  per task: {phases_line(per)}")


if __name__ == "__main__":
    main()
