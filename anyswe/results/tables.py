"""Polars tables from a run directory (polars is imported here, lazily from the package root).

Rates are over *unmasked* samples: a masked sample (infrastructure error, agent timeout, a resolve
reached only after a forced stop) says nothing about the agent, so it is counted, not scored.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from anyswe.errors import ResultsError
from anyswe.results.stats import wilson
from anyswe.results.store import RESULTS, latest_attempts, read_rows

if TYPE_CHECKING:
    import polars as pl

TIME_COLUMNS = ["time_image", "time_sandbox_start", "time_agent", "time_patch_capture", "time_grading", "time_total"]
CELL_KEYS = ["cell", "agent", "model", "provider"]


def task_frame(run_dir: str | Path) -> pl.DataFrame:
    """One row per task (its latest attempt)."""
    import polars as pl

    path = Path(run_dir) / RESULTS
    if not path.is_file():
        raise ResultsError(f"no {RESULTS} in {run_dir} (is it a run directory?)")
    rows = latest_attempts(read_rows(path))
    if not rows:
        raise ResultsError(f"{path} has no results yet")
    return pl.DataFrame(rows, infer_schema_length=None).sort(["cell", "instance_id", "sample"])


def _summary(tasks: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    import polars as pl

    scored = ~pl.col("mask_sample")
    times = []
    for c in TIME_COLUMNS:
        if c in tasks.columns:
            times += [pl.col(c).mean().alias(f"mean_{c}"), pl.col(c).median().alias(f"median_{c}")]
    tokens = [pl.col(c).sum().alias(c) for c in tasks.columns if c.startswith("agent_") and "token" in c]
    table = (
        tasks.group_by(by, maintain_order=True)
        .agg(
            pl.len().alias("tasks"),
            (pl.col("resolved") & scored).sum().alias("resolved"),
            scored.sum().alias("scored"),
            pl.col("mask_sample").sum().alias("masked"),
            pl.col("patch_exists").mean().alias("patch_rate"),
            (pl.col("patch_exists") & ~pl.col("patch_applied")).sum().alias("apply_failures"),
            *times,
            *tokens,
        )
        .sort(by)
    )
    bounds = [wilson(r, n) for r, n in zip(table["resolved"], table["scored"], strict=True)]
    rate = [r / n if n else None for r, n in zip(table["resolved"], table["scored"], strict=True)]
    table = table.with_columns(
        pl.Series("resolve_rate", rate, dtype=pl.Float64),
        pl.Series("ci_low", [b[0] for b in bounds], dtype=pl.Float64),
        pl.Series("ci_high", [b[1] for b in bounds], dtype=pl.Float64),
    )
    first = [*by, "tasks", "resolved", "scored", "resolve_rate", "ci_low", "ci_high", "masked"]
    return table.select(first + [c for c in table.columns if c not in first])


def cell_table(tasks: pl.DataFrame) -> pl.DataFrame:
    """Per cell: tasks, resolved, resolve rate with a 95% Wilson interval, masked, patch rate,
    apply failures, mean and median of each phase time, token totals."""
    return _summary(tasks, CELL_KEYS)


def repo_table(tasks: pl.DataFrame) -> pl.DataFrame:
    """Per cell and repo: the same columns as :func:`cell_table`."""
    return _summary(tasks, [*CELL_KEYS, "repo"])


def instance_matrix(tasks: pl.DataFrame) -> pl.DataFrame:
    """Instance x cell: 1 resolved, 0 not, null masked (mean over samples when there are several)."""
    import polars as pl

    value = pl.when(pl.col("mask_sample")).then(None).otherwise(pl.col("resolved").cast(pl.Float64))
    return (
        tasks.with_columns(value.alias("v"))
        .pivot(on="cell", index="instance_id", values="v", aggregate_function="mean")
        .sort("instance_id")
    )
