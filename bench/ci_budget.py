"""Benchmark: what a CI run costs in CPU, phase by phase, against what the machine's cores can give.

Runs a command (by default ``./.ci/run``) and samples the machine's busy CPU from ``/proc/stat`` every
few seconds (user, nice, system, irq and softirq: everything but idle, iowait and steal, for every
process, host and containers alike). Its output is cut into phases where each marker line first
appears (the Justfile's recipe echoes). Prints each phase's wall time, the core-seconds it used, the
share of the cores it kept busy, and the wall the whole run could not go below on this many cores
(core-seconds / cores) if nothing ever waited. Figures, never asserts.

    python3 bench/ci_budget.py [--log ci.log] [-- ./.ci/run]

Run it on a clean clone (what CI runs) and an otherwise idle machine: every process on the machine
counts, the sampler's own few jiffies included. The standard library only, so that the run's own
environment set-up (``uv sync`` in ``.ci/run``) is inside what it measures.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

#: The first line of each phase in `.ci/run`'s output (the recipes `just` echoes), in order.
MARKERS = (
    ("set-up and lint", ""),
    ("unit tier", 'uv run pytest -m "not containers"'),
    ("provisioning", "bash scripts/provision.sh all"),
    ("container tier (xdist)", '"containers and not exclusive"'),
    ("container tier (exclusive)", '"containers and exclusive"'),
)
TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Sample:
    at: float
    busy: float  # core-seconds since boot
    total: float


def read_stat() -> Sample:
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    busy = user + nice + system + irq + softirq
    return Sample(time.monotonic(), busy / TICKS, (busy + idle + iowait + steal) / TICKS)


def busy_between(samples: list[Sample], start: float, end: float) -> float:
    """Core-seconds busy in [start, end], interpolated between the samples around each end."""

    def at(t: float) -> float:
        before = [s for s in samples if s.at <= t] or samples[:1]
        after = [s for s in samples if s.at >= t] or samples[-1:]
        a, b = before[-1], after[0]
        if b.at == a.at:
            return a.busy
        return a.busy + (b.busy - a.busy) * (t - a.at) / (b.at - a.at)

    return at(end) - at(start)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--log", type=Path, default=Path("ci-budget.log"), help="where the command's output goes")
    ap.add_argument("--every", type=float, default=2.0, help="seconds between /proc/stat samples")
    ap.add_argument("command", nargs="*", default=["./.ci/run"])
    args = ap.parse_args()
    cores = os.cpu_count() or 1
    samples = [read_stat()]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(args.every):
            samples.append(read_stat())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    starts = {MARKERS[0][0]: time.monotonic()}
    with args.log.open("w", buffering=1) as log:  # line by line: the log can be followed as it runs
        proc = subprocess.Popen(args.command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            for name, marker in MARKERS[1:]:
                if name not in starts and marker in line:
                    starts[name] = time.monotonic()
        rc = proc.wait()
    end = time.monotonic()
    stop.set()
    sampler.join()
    samples.append(read_stat())
    order = [(name, starts[name]) for name, _ in MARKERS if name in starts]
    print(f"{' '.join(args.command)}: exit {rc}, {end - order[0][1]:.0f} s on {cores} cores (output: {args.log})")
    print(f"{'phase':<28} {'wall s':>8} {'core-s':>8} {'busy':>6}")
    total_busy = 0.0
    for i, (name, t0) in enumerate(order):
        t1 = order[i + 1][1] if i + 1 < len(order) else end
        used = busy_between(samples, t0, t1)
        total_busy += used
        print(f"{name:<28} {t1 - t0:>8.0f} {used:>8.0f} {used / ((t1 - t0) * cores):>6.0%}")
    wall = end - order[0][1]
    print(f"{'whole run':<28} {wall:>8.0f} {total_busy:>8.0f} {total_busy / (wall * cores):>6.0%}")
    print(f"no faster than {total_busy / cores / 60:.1f} min on {cores} cores with this work (core-s / cores)")


if __name__ == "__main__":
    main()
