"""Benchmark: `anyswe regrade` over the shared corpus of real SWE-bench logs, against a plain script
calling swebench 4.1.0's own `get_eval_report` on the same logs (bench/plain_swebench_regrade.py), and
against the same script with swebench imported lean (``--lean``: the lean anchor, grading alone).

Both run as whole processes (start-up and imports included), alternating A B A B, and the ratio is
taken pair by pair; peak memory is each child's own. Prints figures; never asserts.

    uv run python bench/regrade_corpus.py [--runs 5]
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
BIN = Path(sys.executable).parent


def timed(argv: list[str]) -> tuple[float, float]:
    """(wall seconds, peak RSS MB) of one whole process."""
    t = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    if status != 0:
        raise SystemExit(f"{argv[0]} failed (status {status})")
    return wall, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--data", type=Path, default=SHARED)
    args = parser.parse_args()
    ours = [
        str(BIN / "anyswe"),
        "regrade",
        str(args.data / "verified.jsonl"),
        str(args.data / "corpus" / "logs"),
        "--json",
    ]
    plain = [sys.executable, str(Path(__file__).with_name("plain_swebench_regrade.py")), str(args.data)]
    lean = [*plain[:2], "--lean", str(args.data)]
    timed(ours), timed(plain), timed(lean)  # warm-up: page cache, bytecode
    a, b, c = [], [], []
    for _ in range(args.runs):
        a.append(timed(ours))
        b.append(timed(plain))
        c.append(timed(lean))
    logs = len((args.data / "corpus" / "manifest.jsonl").read_text().splitlines())
    med = statistics.median
    print(f"logs: {logs}, runs: {args.runs} each, alternating")
    for label, runs in (("anyswe regrade:", a), ("plain swebench script:", b), ("lean swebench anchor:", c)):
        print(f"{label:23}{med(x for x, _ in runs):6.2f} s  peak {med(m for _, m in runs):5.0f} MB")
    for label, base in (("ratio anyswe/plain:", b), ("ratio anyswe/lean:", c)):
        ratio = med(x / y for (x, _), (y, _) in zip(a, base, strict=True))
        print(f"{label:23}{ratio:6.2f}x (median of pairs)")


if __name__ == "__main__":
    main()
