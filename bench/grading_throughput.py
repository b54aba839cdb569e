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

from _common import REPO, workdir

SHARED = REPO.parent / "shared" / "swebench"
SPEC = REPO / "specs" / "real_images.yaml"


def _ids() -> list[str]:
    from ruamel.yaml import YAML

    return list(YAML(typ="safe").load(SPEC.read_text())["dataset"]["instance_ids"])


def gold_spec(work: Path, provider: str, concurrency: int, ids: list[str]) -> tuple[Path, Path]:
    """A gold-only spec of ``ids`` on ``provider`` (the real-image template): (spec file, run directory)."""
    run = work / f"anyswe-{provider}-{concurrency}-{time.monotonic_ns()}"
    image = "swebench/sweb.eval.x86_64.{instance_id_docker}:latest"
    extra = {"memory": "4g"} if provider == "docker" else {"overlay_size_mb": 2048}
    spec = {
        "name": "bench-grading",
        "dataset": {"name": "swe-bench-verified", "path": str(SHARED / "verified.jsonl"), "instance_ids": ids},
        "agents": {"gold": {"type": "gold"}},
        # Two sandboxes per task in flight: the agent's is removed while the grading one runs.
        "providers": {provider: {"type": provider, "image": image, "concurrency": 2 * concurrency, **extra}},
        "concurrency": concurrency,
        "retries": {"max_attempts": 1},
        "output_dir": str(run),
    }
    path = work / f"spec-{provider}-{concurrency}.yaml"
    path.write_text(json.dumps(spec))
    return path, run


def anyswe_round(
    work: Path, provider: str, concurrency: int, ids: list[str]
) -> tuple[float, dict[str, bool], dict[str, float]]:
    """``anyswe apply`` of gold on ``provider``: (wall, instance -> resolved, phase -> mean seconds)."""
    from anyswe.results.schema import TIME_FIELDS

    path, run = gold_spec(work, provider, concurrency, ids)
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "anyswe", "apply", str(path)], check=True, capture_output=True, cwd=REPO)
    wall = time.perf_counter() - t
    rows = [json.loads(x) for x in (run / "results.jsonl").read_text().splitlines()]
    verdicts = {r["instance_id"]: bool(r["resolved"]) for r in rows}
    phases = {f: statistics.mean(r[f] or 0.0 for r in rows) for f in TIME_FIELDS}
    return wall, verdicts, phases


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
    ids, cores, work = _ids(), os.cpu_count() or 1, workdir()
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
            per = {f: statistics.median(x[f] for x in phases[p]) for f in phases[p][0]}
            rest = per["time_total"] - sum(v for k, v in per.items() if k != "time_total")
            print(
                f"anyswe {p}: {wall:.1f} s, {len(ids) * 3600 / wall / cores:.0f} instances/core-hour, "
                f"{wall / base:.2f}x swebench; verdicts equal to swebench's in every round: {agree[p]}"
            )
            shown = ", ".join(f"{k.removeprefix('time_')} {v:.2f}" for k, v in per.items())
            print(f"  per task: {shown} (in no phase: {rest:.2f})")


if __name__ == "__main__":
    main()
