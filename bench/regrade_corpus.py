"""Benchmark: time to regrade the shared corpus of real SWE-bench logs, per log.

Prints figures, never asserts: the machines are shared and noisy. The baseline, measured in the
same run, is reading every log from disk, so the ratio says what grading costs on top of I/O.

    uv run python bench/regrade_corpus.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from anyswe.datasets import load_dataset
from anyswe.grading.regrade import log_dirs, regrade

SHARED = Path(__file__).resolve().parents[2] / "shared" / "swebench"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--data", type=Path, default=SHARED)
    args = parser.parse_args()

    ds = load_dataset("princeton-nlp/SWE-bench_Verified", args.data / "verified.jsonl")
    logs = log_dirs(args.data / "corpus" / "logs")
    list(regrade(ds, args.data / "corpus" / "logs"))  # warm-up: imports, parser registration, page cache

    read_times, grade_times = [], []
    for _ in range(args.repeat):
        t = time.perf_counter()
        for d in logs:
            (d / "test_output.txt").read_text(errors="replace")
        read_times.append(time.perf_counter() - t)
        t = time.perf_counter()
        results = list(regrade(ds, args.data / "corpus" / "logs"))
        grade_times.append(time.perf_counter() - t)
    n = len(logs)
    read_ms = statistics.median(read_times) / n * 1000
    grade_ms = statistics.median(grade_times) / n * 1000
    errors = sum("error" in r for r in results)
    print(f"logs: {n} (errors: {errors}), repeats: {args.repeat}")
    print(f"baseline (read log):     {read_ms:8.3f} ms/log")
    print(f"regrade (swebench 4.1.0): {grade_ms:8.3f} ms/log   total {statistics.median(grade_times):.2f} s")
    print(f"ratio regrade/baseline:  {grade_ms / read_ms:8.1f}x")


if __name__ == "__main__":
    main()
