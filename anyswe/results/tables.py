"""Polars tables from a run directory (polars is imported here, lazily from the package root).

Rates are over *unmasked* samples: a masked sample (infrastructure error, agent timeout, a resolve
reached only after a forced stop) says nothing about the agent, so it is counted, not scored.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from anyswe.errors import ResultsError
from anyswe.results.schema import TIME_FIELDS, results_frame
from anyswe.results.stats import wilson
from anyswe.results.store import RESULTS, latest_attempts, read_results

if TYPE_CHECKING:
    import polars as pl

TIME_COLUMNS = list(TIME_FIELDS)
#: Summed per cell: what the agents' model calls cost.
USAGE_COLUMNS = ["model_calls", "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "cost_usd"]
CELL_KEYS = ["cell", "agent", "model", "provider"]


def run_exclusions(run_dir: str | Path) -> dict[str, str]:
    """The instances a run left out on every provider (its spec's exclusion list): id -> reason."""
    import json

    plan = Path(run_dir) / "plan.json"
    if not plan.is_file():
        return {}
    return dict(json.loads(plan.read_text()).get("excluded") or {})


def exclusion_note(excluded: dict[str, str]) -> str | None:
    """One line for tables: how many instances were excluded, and which."""
    if not excluded:
        return None
    ids = ", ".join(sorted(excluded)[:10]) + (", ..." if len(excluded) > 10 else "")
    return f"excluded on every provider: {len(excluded)} instance(s): {ids}"


def task_frame(run_dir: str | Path) -> pl.DataFrame:
    """One row per task (its latest attempt), typed by :class:`~anyswe.results.schema.TaskResult`."""
    path = Path(run_dir) / RESULTS
    if not path.is_file():
        raise ResultsError(f"no {RESULTS} in {run_dir} (is it a run directory?)")
    results = latest_attempts(read_results(path))
    # Rows of instances excluded since they ran (an exclusion list added later) count nowhere.
    excluded = run_exclusions(run_dir)
    results = [r for r in results if r.instance_id not in excluded]
    if not results:
        raise ResultsError(f"{path} has no results yet")
    return results_frame(results).sort(["cell", "instance_id", "sample"])


def _summary(tasks: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    import polars as pl

    scored = ~pl.col("mask_sample")
    times = []
    for c in TIME_COLUMNS:
        if c in tasks.columns:
            times += [pl.col(c).mean().alias(f"mean_{c}"), pl.col(c).median().alias(f"median_{c}")]
    usage = [pl.col(c).sum().alias(c) for c in USAGE_COLUMNS if c in tasks.columns]
    # Rows whose patch raised a reward-hacking flag (grading/flags.py), whatever their verdict.
    flagged = (
        [(pl.col("flags").list.len() > 0).fill_null(False).sum().alias("flagged")] if "flags" in tasks.columns else []
    )
    table = (
        tasks.group_by(by, maintain_order=True)
        .agg(
            pl.len().alias("tasks"),
            (pl.col("resolved") & scored).sum().alias("resolved"),
            scored.sum().alias("scored"),
            pl.col("mask_sample").sum().alias("masked"),
            pl.col("patch_exists").mean().alias("patch_rate"),
            (pl.col("patch_exists") & ~pl.col("patch_applied")).sum().alias("apply_failures"),
            *flagged,
            *times,
            *usage,
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
    apply failures, flagged patches (reward-hacking flags), mean and median of each phase time,
    model calls, tokens and cost."""
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
