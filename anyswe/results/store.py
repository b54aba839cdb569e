"""The run directory: resolved spec, plan, append-only results.jsonl, per-task artefacts, aggregates.

results.jsonl holds one :class:`TaskResult` per finished task attempt, appended with flush and fsync,
so a crash loses at most the attempt being written. A torn last line (a crash mid-write) is cut off
when the store opens for writing. A task counts as done when it has an attempt that did not end in
an infrastructure error; re-applying runs only tasks that are not done, so no result is lost and
none is duplicated. One process at a time may write to a run directory (an flock says so).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import statistics
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from anyswe._files import name_problem
from anyswe.errors import ResultsError
from anyswe.results.schema import RETRYABLE, TaskResult, parse_row

RESULTS = "results.jsonl"

__all__ = ["RESULTS", "RETRYABLE", "RunStore", "aggregate", "latest_attempts", "read_results", "read_rows"]


def read_results(path: Path) -> list[TaskResult]:
    """Every complete row of a results.jsonl, validated (a torn last line is ignored)."""
    if not path.is_file():
        return []
    out = []
    lines = path.read_bytes().split(b"\n")
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            if n == len(lines):  # torn final line: the process died mid-write
                break
            raise ResultsError(f"{path}:{n}: corrupt line in results") from None
        out.append(parse_row(row, f"{path}:{n}"))
    return out


def read_rows(path: Path) -> list[dict[str, Any]]:
    """:func:`read_results` as plain dicts (JSON types)."""
    return [r.model_dump(mode="json") for r in read_results(path)]


def cut_torn_tail(path: Path) -> None:
    """Cut a torn last line (a crash mid-write) off an append-only JSON-lines file before appending:
    a row appended to it would join the torn text on one line and be lost with it."""
    if not path.is_file():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        with open(path, "r+b") as fh:
            fh.truncate(data.rfind(b"\n") + 1)
            fh.flush()
            os.fsync(fh.fileno())


def latest_attempts(results: Iterable[TaskResult]) -> list[TaskResult]:
    """One result per task key: its last attempt."""
    latest: dict[str, TaskResult] = {}
    for r in results:
        latest[r.key] = r
    return list(latest.values())


class RunStore:
    """A run directory opened for writing (``with RunStore(path) as store:``)."""

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)
        self.results_path = self.run_dir / RESULTS
        self._lock_fh: IO[str] | None = None
        self._out: IO[bytes] | None = None
        self._write_lock = threading.Lock()

    def __enter__(self) -> RunStore:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._lock_fh = open(self.run_dir / ".lock", "w")
        try:
            fcntl.flock(self._lock_fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock_fh.close()
            raise ResultsError(f"another anyswe process is writing to {self.run_dir}") from None
        cut_torn_tail(self.results_path)
        self._out = open(self.results_path, "ab", buffering=0)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._out is not None:
            self._out.close()
        if self._lock_fh is not None:
            fcntl.flock(self._lock_fh, fcntl.LOCK_UN)
            self._lock_fh.close()

    # -- rows -------------------------------------------------------------------------------------

    def results(self) -> list[TaskResult]:
        return read_results(self.results_path)

    def done_keys(self) -> set[str]:
        return {r.key for r in self.results() if not r.retryable}

    def attempts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for r in self.results():
            counts[r.key] = counts.get(r.key, 0) + 1
        return counts

    def append(self, result: TaskResult) -> None:
        """Append one result durably: written and fsynced before returning, or not at all.

        A write the disk refuses part-way (a full disk) is cut back off, so the file never holds a
        torn line between good ones; the caller gets a :class:`ResultsError`.
        """
        if self._out is None:
            raise ResultsError("the run store is not open")
        line = result.to_json_line()
        with self._write_lock:
            fd = self._out.fileno()
            size = os.fstat(fd).st_size
            try:
                view = memoryview(line)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            except OSError as exc:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, size)
                raise ResultsError(f"cannot append to {self.results_path}: {exc}") from exc

    # -- artefacts --------------------------------------------------------------------------------

    def task_dir(self, key: str) -> Path:
        """``tasks/<key>``; a key that is not one plain name (it would lead outside ``tasks/``) is refused."""
        problem = name_problem(key)
        if problem is not None:
            where = self.run_dir / "tasks"
            raise ResultsError(f"task key {key[:80]!r} {problem}: it cannot name a directory under {where}")
        d = self.run_dir / "tasks" / key
        d.mkdir(parents=True, exist_ok=True)
        if d.resolve().parent != (self.run_dir / "tasks").resolve():
            raise ResultsError(f"{d} is a link out of {self.run_dir}/tasks: not written")
        return d

    def write_text(self, name: str, text: str) -> None:
        _atomic_write(self.run_dir / name, text)

    def write_aggregates(self) -> dict[str, dict[str, float]]:
        """``cells/<cell>/aggregate_metrics.json`` for every cell with results."""
        by_cell: dict[str, list[dict[str, Any]]] = {}
        for r in latest_attempts(self.results()):
            by_cell.setdefault(r.cell, []).append(r.model_dump())
        out = {}
        for cell, rows in by_cell.items():
            metrics = aggregate(rows)
            _atomic_write(
                self.run_dir / "cells" / cell / "aggregate_metrics.json", json.dumps(metrics, indent=2) + "\n"
            )
            out[cell] = metrics
        return out


def _numeric(rows: list[dict[str, Any]]) -> Iterator[tuple[str, list[float]]]:
    names = sorted(
        {
            k
            for r in rows
            for k, v in r.items()
            if isinstance(v, (int, float)) and k not in ("sample", "attempt", "schema_version")
        }
    )
    for name in names:
        values = [float(r[name]) for r in rows if isinstance(r.get(name), (int, float)) and r.get(name) is not None]
        if values:
            yield name, values


def aggregate(rows: list[dict[str, Any]]) -> dict[str, float]:
    """mean/min/max/median/std of every numeric (and boolean) field; ``mean/reward`` is the resolve rate."""
    out: dict[str, float] = {"count": float(len(rows))}
    for name, values in _numeric(rows):
        out[f"mean/{name}"] = statistics.fmean(values)
        out[f"min/{name}"] = min(values)
        out[f"max/{name}"] = max(values)
        out[f"median/{name}"] = statistics.median(values)
        out[f"std/{name}"] = statistics.stdev(values) if len(values) > 1 else 0.0
    return {k: (v if math.isfinite(v) else 0.0) for k, v in out.items()}


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
