"""Benchmark: the cell table and the backend diff over synthetic task rows (default 1 million).

Prints time and peak memory of each step; never asserts (machines are shared and noisy). Rows:
3 agents x 2 models x 2 providers (12 cells) x 500 instances x as many samples as make ``--rows``;
each instance has its own difficulty, so samples of one instance are correlated, as in real runs.
The baseline, measured in the same run, is building the frame itself.

    uv run python bench/tables.py [--rows 1000000]
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np
import polars as pl

from anyswe.results.compare import compare_by
from anyswe.results.schema import polars_schema
from anyswe.results.tables import cell_table


def synthetic(rows: int, seed: int = 0) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    agents, models, providers = ("hermes", "claude_code", "openclaw"), ("m1", "m2"), ("docker", "apptainer")
    cells = [(a, m, p) for a in agents for m in models for p in providers]
    instances = 500
    samples = max(1, rows // (len(cells) * instances))
    difficulty = rng.beta(0.6, 0.8, size=instances)
    parts = []
    for agent, model, provider in cells:
        inst = np.repeat(np.arange(instances), samples)
        resolved = rng.random(inst.size) < difficulty[inst]
        parts.append(
            pl.DataFrame(
                {
                    "key": [f"{agent}{model}{provider}"] * inst.size,
                    "cell": f"{agent}.{model}.{provider}",
                    "agent": agent,
                    "model": model,
                    "provider": provider,
                    "provider_type": provider,
                    "instance_id": pl.Series([f"repo__inst-{i}" for i in inst]),
                    "sample": np.tile(np.arange(samples), instances),
                    "resolved": resolved,
                    "mask_sample": rng.random(inst.size) < 0.01,
                    "time_total": rng.exponential(300, size=inst.size),
                }
            )
        )
    frame = pl.concat(parts)
    schema = polars_schema()
    missing = [pl.lit(None, dtype=schema[c]).alias(c) for c in schema if c not in frame.columns]
    return frame.with_columns(missing).select([pl.col(c).cast(schema[c]) for c in schema])


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def timed(label: str, fn):  # type: ignore[no-untyped-def]
    t = time.perf_counter()
    out = fn()
    print(f"{label:28s} {time.perf_counter() - t:8.3f} s   peak RSS so far {peak_mb():7.0f} MB")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args()
    tasks = timed("build frame (baseline)", lambda: synthetic(args.rows))
    print(f"rows: {tasks.height:,}  cells: {tasks['cell'].n_unique()}  instances: {tasks['instance_id'].n_unique()}")
    timed("cell table", lambda: cell_table(tasks))
    found = timed("backend diff (compare_by)", lambda: compare_by(tasks, "provider"))
    print(f"comparisons: {len(found)}; first: {found[0]}")


if __name__ == "__main__":
    main()
