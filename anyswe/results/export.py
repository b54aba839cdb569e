"""Exports of a run directory that other tools read: predictions per cell and all task rows as parquet."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from anyswe.results.schema import results_frame
from anyswe.results.store import RESULTS, latest_attempts, read_results

if TYPE_CHECKING:
    from anyswe.results.schema import TaskResult


def export_run(run_dir: str | Path) -> list[Path]:
    """Write ``cells/<cell>/predictions.jsonl`` (SWE-bench predictions) and ``tasks.parquet``; return the paths."""
    run = Path(run_dir)
    results = latest_attempts(read_results(run / RESULTS))
    if not results:
        return []
    written = []
    by_cell: dict[str, list[TaskResult]] = {}
    for r in results:
        by_cell.setdefault(r.cell, []).append(r)
    for cell, cell_results in by_cell.items():
        # A predictions file holds one patch per instance: sample 0 in predictions.jsonl, others beside it.
        for sample in sorted({r.sample for r in cell_results}):
            name = "predictions.jsonl" if sample == 0 else f"predictions.s{sample}.jsonl"
            path = run / "cells" / cell / name
            path.parent.mkdir(parents=True, exist_ok=True)
            chosen = sorted((r for r in cell_results if r.sample == sample), key=lambda r: r.instance_id)
            lines = [
                json.dumps({"instance_id": r.instance_id, "model_name_or_path": cell, "model_patch": r.model_patch})
                for r in chosen
            ]
            _atomic(path, "\n".join(lines) + "\n")
            written.append(path)
    parquet = run / "tasks.parquet"
    tmp = parquet.with_name(".tasks.parquet.tmp")
    results_frame(results).write_parquet(tmp)
    os.replace(tmp, parquet)
    written.append(parquet)
    return written


def _atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
