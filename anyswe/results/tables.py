"""Polars tables from a run directory (polars is imported here, lazily from the package root).

Two rates, because an evaluation and a trainer ask different questions:

- ``resolve_rate`` (``resolved`` of ``scored``, with its Wilson interval) counts what the official
  harness counts: every task that ran and ended is in its denominator as its tests said, whatever
  the agent or its patch did to end it (a timeout, a step limit, a crash, an OOM). Only rows whose
  verdict cannot be trusted leave it: error kinds infra, grading and internal
  (:data:`~anyswe.execute.decide.UNTRUSTED`). Were agent timeouts left out, an agent that stalls
  on the hard tasks would score higher than one that tries and fails.
- ``rl_rate`` (``rl_resolved`` of ``rl_scored``) is over unmasked samples only: the RL mask
  (execute/decide.py, NeMo Gym's semantics) also drops agent timeouts, a resolve after a forced
  stop and off-policy samples, which is right for a trainer's reward and wrong for a leaderboard.

The two are equal unless some sample is masked for a reason other than an untrusted error.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from anyswe.errors import ResultsError
from anyswe.execute.decide import UNTRUSTED
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


def task_frame(run_dir: str | Path, over: Path | None = None) -> pl.DataFrame:
    """One row per task (its latest attempt), typed by :class:`~anyswe.results.schema.TaskResult`.

    ``over``: an exclusion list (a gold census's): its instances count nowhere either, so the rates
    are over the supported set of a run made without it."""
    path = Path(run_dir) / RESULTS
    if not path.is_file():
        raise ResultsError(f"no {RESULTS} in {run_dir} (is it a run directory?)")
    results = latest_attempts(read_results(path))
    # Rows of instances excluded since they ran (an exclusion list added later) count nowhere.
    excluded = run_exclusions(run_dir) | over_exclusions(over)
    results = [r for r in results if r.instance_id not in excluded]
    if not results:
        raise ResultsError(f"{path} has no results yet")
    return results_frame(results).sort(["cell", "instance_id", "sample"])


def over_exclusions(over: Path | None) -> dict[str, str]:
    """instance_id -> reason of an exclusion list given to the tables (none: empty)."""
    if over is None:
        return {}
    from anyswe.datasets.exclusions import Exclusions

    return Exclusions.of([], over).reasons


def counted(tasks: pl.DataFrame) -> pl.Expr:
    """Whether a row is in the harness rate's denominator: its error kind, if any, is not one after
    which the tests' verdict means nothing. A frame without ``error_kind`` (made by hand) has no errors."""
    import polars as pl

    if "error_kind" not in tasks.columns:
        return pl.lit(True)
    return ~pl.col("error_kind").is_in(sorted(UNTRUSTED)).fill_null(False)


def rates_differ(rows: Iterable[Mapping[str, Any]]) -> bool:
    """Whether any row of a cell or repo table has an RL rate other than its harness rate (counts
    compared, so 0/1 against 0/2 differs too): where views show both. Rows without the RL columns
    (a table from before them, or a selection) have only the one rate."""
    with_rl = [r for r in rows if "rl_scored" in r]
    return any((r.get("rl_resolved"), r["rl_scored"]) != (r.get("resolved"), r.get("scored")) for r in with_rl)


def _rate(resolved: pl.Series, n: pl.Series) -> list[float | None]:
    return [r / k if k else None for r, k in zip(resolved, n, strict=True)]


def _summary(tasks: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    import polars as pl

    scored = counted(tasks)
    unmasked = ~pl.col("mask_sample")
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
            (pl.col("resolved") & unmasked).sum().alias("rl_resolved"),
            unmasked.sum().alias("rl_scored"),
            pl.col("patch_exists").mean().alias("patch_rate"),
            (pl.col("patch_exists") & ~pl.col("patch_applied")).sum().alias("apply_failures"),
            *flagged,
            *times,
            *usage,
        )
        .sort(by)
    )
    bounds = [wilson(r, n) for r, n in zip(table["resolved"], table["scored"], strict=True)]
    table = table.with_columns(
        pl.Series("resolve_rate", _rate(table["resolved"], table["scored"]), dtype=pl.Float64),
        pl.Series("ci_low", [b[0] for b in bounds], dtype=pl.Float64),
        pl.Series("ci_high", [b[1] for b in bounds], dtype=pl.Float64),
        pl.Series("rl_rate", _rate(table["rl_resolved"], table["rl_scored"]), dtype=pl.Float64),
    )
    first = [*by, "tasks", "resolved", "scored", "resolve_rate", "ci_low", "ci_high", "masked"]
    first += ["rl_resolved", "rl_scored", "rl_rate"]
    return table.select(first + [c for c in table.columns if c not in first])


def cell_table(tasks: pl.DataFrame) -> pl.DataFrame:
    """Per cell: tasks; resolved of scored (every task that ran and ended) and the resolve rate with
    a 95% Wilson interval; masked; the RL rate (rl_resolved of rl_scored, unmasked samples); patch
    rate, apply failures, flagged patches (reward-hacking flags), mean and median of each phase time,
    model calls, tokens and cost."""
    return _summary(tasks, CELL_KEYS)


def repo_table(tasks: pl.DataFrame) -> pl.DataFrame:
    """Per cell and repo: the same columns as :func:`cell_table`."""
    return _summary(tasks, [*CELL_KEYS, "repo"])


def instance_matrix(tasks: pl.DataFrame, *, rl: bool = False) -> pl.DataFrame:
    """Instance x cell: 1 resolved, 0 not, null for no verdict (an infra, grading or internal error);
    the mean over samples when there are several. With ``rl``, null for every masked sample instead
    (the RL rate's view: agent timeouts and a resolve after a forced stop are null too)."""
    import polars as pl

    out = pl.col("mask_sample") if rl else ~counted(tasks)
    value = pl.when(out).then(None).otherwise(pl.col("resolved").cast(pl.Float64))
    return (
        tasks.with_columns(value.alias("v"))
        .pivot(on="cell", index="instance_id", values="v", aggregate_function="mean")
        .sort("instance_id")
    )
