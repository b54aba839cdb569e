"""Benchmark: a matrix over docker and apptainer against each provider alone, I/O-bound tasks.

Each provider allows ``c`` sandboxes at once (``providers.<p>.concurrency``) and the run ``2c`` tasks
(``concurrency``), as a spec that gives each provider its share does; ``2c`` tasks per provider,
whose agent waits inside its sandbox. The baseline, measured in the same run: each provider alone
with the same bound and tasks. The matrix's ideal is the slower of the two alone (both at once);
the two one after the other is their sum. Prints figures; never asserts.

    uv run python bench/mixed_providers.py [--seconds 10] [--levels 2,4] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import time
from pathlib import Path

from _common import run_spec, sleep_spec, workdir

PROVIDERS = ("docker", "apptainer")


def spec(work: Path, providers: tuple[str, ...], c: int, seconds: float) -> Path:
    """``2c`` tasks per provider (samples of one demo instance), each provider bounded to ``c``."""
    name = "-".join(providers)
    body = {
        "name": f"mixed-{name}-{c}",
        "dataset": {"name": "demo", "instance_ids": ["demo__calc-1"]},
        "agents": {"sleep": {"type": "bench.sleep_agent:SleepAgent", "seconds": seconds}},
        "providers": {p: {"type": p, "concurrency": c} for p in providers},
        "matrix": {"agents": ["sleep"], "providers": list(providers)},
        "samples": 2 * c,
        "concurrency": c * len(providers),
        "output_dir": str(work / f"run-{name}-{c}-{time.monotonic_ns()}"),
    }
    path = work / f"spec-{name}-{c}.json"
    path.write_text(json.dumps(body))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--levels", default="2,4")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    work = workdir()
    for p in PROVIDERS:  # warm-up: each provider's image and SIF
        run_spec(sleep_spec(work, provider=p, tasks=1, seconds=0, concurrency=1))
    print(f"agent waits {args.seconds:.0f} s per task; medians of {args.rounds} rounds, alternating")
    for c in (int(x) for x in args.levels.split(",")):
        walls: dict[str, list[float]] = {"docker": [], "apptainer": [], "matrix": []}
        for _ in range(args.rounds):
            for p in PROVIDERS:
                walls[p].append(run_spec(spec(work, (p,), c, args.seconds))[0])
            wall, rows = run_spec(spec(work, PROVIDERS, c, args.seconds))
            assert len(rows) == 4 * c and not any(r["error_kind"] for r in rows), rows
            walls["matrix"].append(wall)
        med = {k: statistics.median(v) for k, v in walls.items()}
        ideal, serial = max(med["docker"], med["apptainer"]), med["docker"] + med["apptainer"]
        print(
            f"c={c} per provider, {2 * c} tasks each: docker alone {med['docker']:.1f} s, apptainer alone "
            f"{med['apptainer']:.1f} s; the matrix {med['matrix']:.1f} s = {med['matrix'] / ideal:.2f}x the "
            f"slower alone (ideal 1.00x; one after the other {serial / ideal:.2f}x)"
        )
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
