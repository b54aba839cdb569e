"""Benchmark: one process that grades one real SWE-bench log through anyswe's swebench adapter, with
the lean import (only swebench's grading parts) against the same process after a plain
``import swebench`` (the whole package: the baseline, what the adapter did before).

Each child loads the 500 Verified rows, grades one corpus log (``eval_report``), builds its eval
script, reads the patch-apply ladder and checks the verdict against the official report; it prints
its module count. Alternating A B A B; the ratio is taken pair by pair; peak memory is each child's
own. Prints figures; never asserts.

    uv run python bench/swebench_import.py [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

SHARED = Path(__file__).resolve().parents[2] / "shared" / "swebench"

CHILD = """
import json, sys
from pathlib import Path
if sys.argv[1] == "whole":
    import swebench  # the package __init__: the whole harness
from anyswe.datasets.instance import Instance
from anyswe.grading import swebench as sb
data = Path(sys.argv[2])
rows = {r["instance_id"]: r for r in map(json.loads, (data / "verified.jsonl").read_text().splitlines())}
entry = json.loads((data / "corpus" / "manifest.jsonl").read_text().splitlines()[0])
logs = data / "corpus" / "logs" / entry["key"]
instance = Instance.model_validate(rows[entry["instance_id"]])
report = sb.eval_report(instance, (logs / "test_output.txt").read_text())
official = json.loads((logs / "report.json").read_text())[entry["instance_id"]]
sb.eval_script(instance)
sb.patch_apply_ladder()
assert report["resolved"] == official["resolved"], (report["resolved"], official["resolved"])
print(len(sys.modules))
"""


def timed(mode: str, data: Path) -> tuple[float, float, int]:
    """(wall seconds, peak RSS MB, modules) of one whole child process."""
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", CHILD, mode, str(data)], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    if status != 0:
        raise SystemExit(f"the {mode} child failed (status {status})")
    return wall, usage.ru_maxrss / 1024, int(out.decode().split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--data", type=Path, default=SHARED)
    args = parser.parse_args()
    lean, whole = [], []
    for _ in range(args.runs):
        lean.append(timed("lean", args.data))
        whole.append(timed("whole", args.data))
    print(f"one process grading one Verified log, {args.runs} runs each, alternating")
    for name, runs in (("lean import (anyswe)", lean), ("whole swebench (baseline)", whole)):
        wall = statistics.median(r[0] for r in runs)
        peak = max(r[1] for r in runs)
        print(f"{name:27s} {wall:6.2f} s  peak {peak:5.0f} MB  {runs[0][2]:5d} modules")
    ratio = statistics.median(a[0] / b[0] for a, b in zip(lean, whole, strict=True))
    print(f"ratio lean/whole:           {ratio:5.2f}x (median of pairs)")


if __name__ == "__main__":
    main()
