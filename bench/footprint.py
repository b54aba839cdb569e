"""Benchmark: the driver's peak memory with 64 sandboxes at once (an agent that waits in each).

The baseline, measured in the same process first, is the driver with one sandbox at a time. Peak RSS
of this process only (the runtimes' own daemons and the containers are not the driver). Prints
figures; never asserts.

    uv run python bench/footprint.py [--sandboxes 64] [--seconds 20] [--provider docker]
"""

from __future__ import annotations

import argparse
import resource
import shutil

from _common import run_spec, sleep_spec, workdir


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sandboxes", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--provider", default="docker")
    args = parser.parse_args()
    work = workdir()
    wall, _ = run_spec(sleep_spec(work, provider=args.provider, tasks=2, seconds=1, concurrency=1))
    one = peak_mb()
    print(f"driver, 1 sandbox at a time:   peak RSS {one:6.0f} MB")
    n = args.sandboxes
    wall, rows = run_spec(sleep_spec(work, provider=args.provider, tasks=n, seconds=args.seconds, concurrency=n))
    many = peak_mb()
    errors = sum(1 for r in rows if r["error_kind"])
    print(f"driver, {n} sandboxes at once: peak RSS {many:6.0f} MB ({many / one:.2f}x), {n} tasks in {wall:.0f} s, "
          f"{errors} errors")  # fmt: skip
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
