"""What the report draws when a task is opened: its trajectory as steps, phases, patch, tests and test
output, read from the task's directory as untrusted (report_tasks.py puts it in the page or in chunk
files; past INLINE_TASKS the chunks are made by worker processes, each writing its own files).

A task's directory is opened once (:class:`~anyswe._files.TaskDir`: no link followed at any step,
regular files only, capped, a refusal a one-line note) and its files read by name from it: the
report reads five files of each task, and walking the path again for each was a third of the render
at 10,000 tasks.
"""

from __future__ import annotations

import json
import os
import pickle
import sys
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from anyswe._files import TaskDir
from anyswe.errors import ResultsError
from anyswe.results.schema import PHASE_FIELDS

#: Characters kept of each text (a patch, a log, a message).
MAX_TEXT = 20_000
#: The most read of a trajectory (its steps are drawn, each text cut); other files: _files.READ_LIMIT.
TRAJECTORY_LIMIT = 256 * 1024 * 1024


def _cut(text: str, limit: int = MAX_TEXT) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n... ({len(text) - limit} more characters)"


def page_json(value: Any) -> str:
    """``value`` as JSON that is safe inside a script element: the HTML parser ends one at ``</script``
    and, after ``<!--``, treats ``<script`` as opening a nested one (then the page's own ``</script>``
    no longer ends it and no script of the page runs). JSON has ``<``, ``>`` and ``&`` only inside
    strings, where their escapes mean the same."""
    return json.dumps(value).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def run_trajectory(run: Path, row: Mapping[str, Any], problems: list[str] | None = None) -> list[Any] | None:
    """A row's steps read from its run directory only (no link followed at any step, no path out of the
    run), with its agent transcripts; None when it has no trajectory. ``problems``: as
    :func:`~anyswe.gateway.trajectory.read_trajectory` takes it (None: a line that cannot be read raises)."""
    with TaskDir(run, f"tasks/{row['key']}") as task:
        return _trajectory(run, task, row, problems)


def _trajectory(run: Path, task: TaskDir, row: Mapping[str, Any], problems: list[str] | None) -> list[Any] | None:
    """The task's steps as :func:`~anyswe.gateway.trajectory.read_trajectory` reads them, the file and its
    agent transcripts read without following a link: from the task's open directory when the trajectory
    is in it (as the gateway writes it), else from its own."""
    from anyswe.gateway.trajectory import read_trajectory

    rel = str(row.get("trajectory_path") or f"{task.rel}/trajectory.jsonl")
    path = PurePosixPath(rel)
    parent = "" if path.parent == PurePosixPath(".") else str(path.parent)
    try:
        if parent == task.rel:
            text, transcripts = _read_beside(task, path.name)
        else:
            with TaskDir(run, parent) as where:
                text, transcripts = _read_beside(where, path.name)
    except ValueError:  # absolute, through "..", or no file name: not a file of the run
        if problems is None:
            raise ResultsError(f"{run}: task {row['key']}'s trajectory_path {rel!r} is not a file of the run") from None
        return None
    if text is None:
        return None
    if problems is None and text.startswith("[anyswe: "):  # refused: through a link, not a regular file
        raise ResultsError(f"{run}: {text.strip()[9:-1]}")
    return read_trajectory(run / rel, transcripts, problems=problems, text=text)


def _read_beside(where: TaskDir, name: str) -> tuple[str | None, dict[str, str]]:
    """The trajectory ``name`` in ``where`` (bytes that are not UTF-8 kept: its line's problem) and the
    agent transcripts beside it (one listing of the open directory, not a read per agent type)."""
    from anyswe.agents import transcript_readers

    text = where.read(name, limit=TRAJECTORY_LIMIT, errors="surrogateescape")
    if text is None:
        return None, {}
    present = where.names()
    return text, {n: t for n in transcript_readers() if n in present and (t := where.read(n)) is not None}


def _calls(calls: list[Any]) -> list[list[str]]:
    return [[c.name, json.dumps(c.arguments)[:2000]] for c in calls]


def _steps(run: Path, task: TaskDir, row: dict[str, Any], problems: list[str]) -> list[dict[str, Any]]:
    """The task's trajectory as the page draws it; each line it cannot read (file:line: why) goes to
    ``problems``."""
    out = []
    for s in _trajectory(run, task, row, problems) or []:
        reply = s.reply
        out.append(
            {
                "refused": None if s.refused is None else str(s.refused),
                "in": s.usage.input_tokens,
                "out": s.usage.output_tokens,
                "s": s.latency_s,
                "cost": s.cost_usd,
                "messages": [[m.role, _cut(m.text, 4000), _calls(m.tool_calls)] for m in s.messages],
                "text": "" if reply is None else _cut(reply.text, 4000),
                "reasoning": "" if reply is None else _cut(reply.reasoning or "", 4000),
                "calls": [] if reply is None else _calls(reply.tool_calls),
                "stop": None if reply is None else reply.stop,
                "results": [[_cut(m.text, 4000), bool(m.is_error)] for m in s.tool_results],
            }
        )
    return out


def _tests(text: str | None) -> dict[str, Any]:
    try:
        data = json.loads(text or "{}")
    except json.JSONDecodeError:  # a refusal's note, too
        return {}
    entry: dict[str, Any] = next(iter(data.values()), {}) if isinstance(data, dict) else {}
    return entry.get("tests_status") or {}


def detail(run: Path, row: dict[str, Any], page_dir: Path | None = None) -> dict[str, Any]:
    """What the page draws when a task is opened (``run``: the run directory, resolved: it may be named
    through a link, nothing in it is followed; ``row``: a validated TaskResult's, its key a task key;
    ``problems``: what of its trajectory could not be read; ``atif``: a link to its ATIF export, from
    the page's directory ``page_dir``, resolved, once ``anyswe export atif`` wrote one)."""
    key = str(row["key"])
    problems: list[str] = []
    atif = run / "atif" / f"{key}.json"
    with TaskDir(run, f"tasks/{key}") as task:
        return {
            "atif": _href(atif, page_dir) if atif.is_file() else "",
            "meta": f"applied by: {row.get('applied_by') or 'not applied'}; exit: {row.get('exit_reason')}; "
            f"error: {row.get('error') or 'none'}; flags: {', '.join(row.get('flags') or []) or 'none'}",
            "phases": [[p.removeprefix("time_"), row.get(p) or 0.0] for p in PHASE_FIELDS],
            "patch": _cut(task.read("patch.diff") or ""),
            "tests": _tests(task.read("report.json")),
            "output": _cut(task.read("test_output.txt") or ""),
            "steps": _steps(run, task, row, problems),
            "problems": problems,
        }


def _href(target: Path, page_dir: Path | None) -> str:
    """A link to a local file: relative to the page where it is known (the pair can move together)."""
    from urllib.parse import quote

    if page_dir is None:
        return target.as_uri()
    return quote(os.path.relpath(target, page_dir))


def write_chunk(job: tuple[Path, Path | None, list[dict[str, Any]], Path]) -> tuple[dict[str, int], list[str]]:
    """A worker's part of a large report: the details of ``rows`` (``job``: run, page_dir, rows, file),
    written to its chunk file as the page loads it; back go each task's step count (for the table)
    and the trajectory lines it could not read, in the rows' order."""
    run, page_dir, rows, out = job
    details = {str(r["key"]): detail(run, r, page_dir) for r in rows}
    out.write_text(f"anysweTasks({page_json(details)});\n")
    return {k: len(d["steps"]) for k, d in details.items()}, [p for d in details.values() for p in d["problems"]]


def main() -> None:
    """A worker process (``python -m anyswe.results.report_detail``): chunk jobs pickled on stdin (from
    the report's own process), each written, their results pickled on stdout in the jobs' order."""
    jobs = pickle.load(sys.stdin.buffer)
    pickle.dump([write_chunk(job) for job in jobs], sys.stdout.buffer)


if __name__ == "__main__":
    main()
