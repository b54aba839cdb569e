"""Benchmark: throughput of I/O-bound tasks (an agent that waits inside its sandbox) at concurrency
1, 2, 4, 8, 16, and its ratio to ideal scaling.

The baseline, measured in the same run, is concurrency 1: ideal throughput at concurrency c is c
times that. Each level runs 2c tasks so every slot is used twice. Prints figures; never asserts.

    uv run python bench/concurrency.py [--seconds 10] [--levels 1,2,4,8,16] [--provider docker]
"""

from __future__ import annotations

import argparse
import shutil

from _common import run_spec, sleep_spec, workdir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--levels", default="1,2,4,8,16")
    parser.add_argument("--provider", default="docker")
    args = parser.parse_args()
    work = workdir()
    run_spec(sleep_spec(work, provider=args.provider, tasks=1, seconds=0, concurrency=1))  # warm-up: the image
    base = None
    print(f"{args.provider}, agent waits {args.seconds:.0f} s per task")
    for c in (int(x) for x in args.levels.split(",")):
        tasks = 2 * c
        wall, rows = run_spec(
            sleep_spec(work, provider=args.provider, tasks=tasks, seconds=args.seconds, concurrency=c)
        )
        assert len(rows) == tasks
        throughput = tasks / wall
        base = base or throughput
        print(f"concurrency {c:3d}: {tasks:3d} tasks in {wall:7.1f} s, {throughput * 60:7.2f} tasks/min, "
              f"{throughput / (c * base):6.1%} of ideal")  # fmt: skip
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
