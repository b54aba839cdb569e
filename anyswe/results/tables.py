"""Polars tables from a run directory (polars is imported here, lazily from the package root)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from anyswe.errors import ResultsError
from anyswe.results.store import RESULTS, latest_attempts, read_rows

if TYPE_CHECKING:
    import polars as pl

TIME_COLUMNS = ["time_image", "time_sandbox_start", "time_agent", "time_patch_capture", "time_grading", "time_total"]


def task_frame(run_dir: str | Path) -> pl.DataFrame:
    """One row per task (its latest attempt)."""
    import polars as pl

    path = Path(run_dir) / RESULTS
    if not path.is_file():
        raise ResultsError(f"no {RESULTS} in {run_dir} (is it a run directory?)")
    rows = latest_attempts(read_rows(path))
    if not rows:
        return pl.DataFrame()
    return pl.DataFrame(rows, infer_schema_length=None).sort(["cell", "instance_id", "sample"])


def cell_table(tasks: pl.DataFrame) -> pl.DataFrame:
    """Per cell: tasks, resolved, resolve rate, masked, patch rate, apply failures and mean phase times."""
    import polars as pl

    if tasks.is_empty():
        return pl.DataFrame()
    times = [pl.col(c).mean().alias(f"mean_{c}") for c in TIME_COLUMNS if c in tasks.columns]
    return (
        tasks.group_by(["cell", "agent", "model", "provider"], maintain_order=True)
        .agg(
            pl.len().alias("tasks"),
            pl.col("resolved").sum().alias("resolved"),
            pl.col("reward").mean().alias("resolve_rate"),
            pl.col("mask_sample").sum().alias("masked"),
            pl.col("patch_exists").mean().alias("patch_rate"),
            (pl.col("patch_exists") & ~pl.col("patch_applied")).sum().alias("apply_failures"),
            *times,
        )
        .sort("cell")
    )
