"""Exports of a run directory that other tools read: predictions per cell and all task rows as parquet."""

from __future__ import annotations

import json
import os
from pathlib import Path

from anyswe.results.store import RESULTS, latest_attempts, read_rows


def export_run(run_dir: str | Path) -> list[Path]:
    """Write ``cells/<cell>/predictions.jsonl`` (SWE-bench predictions) and ``tasks.parquet``; return the paths."""
    import polars as pl

    run = Path(run_dir)
    rows = latest_attempts(read_rows(run / RESULTS))
    if not rows:
        return []
    written = []
    by_cell: dict[str, list[dict[str, object]]] = {}
    for row in rows:
        by_cell.setdefault(str(row["cell"]), []).append(row)
    for cell, cell_rows in by_cell.items():
        # A predictions file holds one patch per instance: sample 0 in predictions.jsonl, others beside it.
        samples = sorted({int(str(r["sample"])) for r in cell_rows})
        for sample in samples:
            name = "predictions.jsonl" if sample == 0 else f"predictions.s{sample}.jsonl"
            path = run / "cells" / cell / name
            path.parent.mkdir(parents=True, exist_ok=True)
            chosen = sorted(
                (r for r in cell_rows if int(str(r["sample"])) == sample), key=lambda r: str(r["instance_id"])
            )
            lines = [
                json.dumps(
                    {
                        "instance_id": r["instance_id"],
                        "model_name_or_path": cell,
                        "model_patch": r.get("model_patch") or "",
                    }
                )
                for r in chosen
            ]
            _atomic(path, "\n".join(lines) + "\n")
            written.append(path)
    parquet = run / "tasks.parquet"
    tmp = parquet.with_name(".tasks.parquet.tmp")
    pl.DataFrame(rows, infer_schema_length=None).write_parquet(tmp)
    os.replace(tmp, parquet)
    written.append(parquet)
    return written


def _atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
