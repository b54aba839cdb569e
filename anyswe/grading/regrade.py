"""Re-grade stored test logs offline, one verdict per log; one bad log never stops the others."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from anyswe.datasets import Dataset, Instance
from anyswe.errors import AnysweError, ResultsError
from anyswe.grading import get_harness, harness_for


def instance_for_key(key: str, rows: dict[str, Instance]) -> str | None:
    """The instance a log directory is for: ``key`` itself, or the part after its last ``__`` naming a row.

    ``vexp__93265668__astropy__astropy-14539`` -> ``astropy__astropy-14539``: instance ids contain ``__``
    themselves, so the cut points are tried from the right until one names a row.
    """
    if key in rows:
        return key
    idx = len(key)
    while (idx := key.rfind("__", 0, idx)) != -1:
        candidate = key[idx + 2 :]
        if candidate in rows:
            return candidate
    return None


def log_dirs(log_dir: Path) -> list[Path]:
    """Directories holding a ``test_output.txt``: below LOG_DIR, or below an anyswe run directory's tasks/."""
    if not log_dir.is_dir():
        raise ResultsError(f"log directory not found: {log_dir}")
    root = log_dir / "tasks" if (log_dir / "results.jsonl").is_file() else log_dir
    return sorted(p.parent for p in root.glob("*/test_output.txt"))


def regrade(dataset: Dataset, log_dir: Path) -> Iterator[dict[str, Any]]:
    """``{key, instance_id, resolved, tests_status}`` per log (or ``{key, instance_id, error}``)."""
    rows = dataset.by_id()
    for d in log_dirs(log_dir):
        key = d.name
        iid = instance_for_key(key, rows)
        if iid is None:
            yield {"key": key, "instance_id": None, "error": f"no row of {dataset.name} matches {key!r}"}
            continue
        try:
            inst = rows[iid]
            harness = get_harness(harness_for(inst, spec_harness=None, dataset_harness=dataset.harness))
            verdict = harness.grade_log_file(inst, d / "test_output.txt")
            yield {"key": key, "instance_id": iid, "resolved": verdict.resolved, "tests_status": verdict.tests_status}
        except (AnysweError, OSError) as exc:
            yield {"key": key, "instance_id": iid, "error": f"{type(exc).__name__}: {exc}"}
