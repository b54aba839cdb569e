"""The report's tasks: one row per task, whose detail is drawn when it is opened.

The rows are JSON the page's script draws, a page of them at a time; each task's detail (its
trajectory as steps, phase-timing bars, the patch highlighted, the FAIL_TO_PASS and PASS_TO_PASS
results, the test output; report_detail.py) is JSON in the page or its chunk files, and the script
draws it the first time the task is opened: a report of 10,000 tasks opens as a table, not as
10,000 drawn trajectories. ``#task=KEY&step=N`` in the address opens that task and step. Flipped
pairs, with the triage's verdict when ``anyswe triage`` ran, link their two tasks side by side.
Text from the run is put in the page as JSON (the script sets it as text, never as HTML) and long
texts are cut.

A run directory is read as untrusted: its rows are validated strictly, a key must be a task key
(results/schema.py), and a task's files are read only through ``_files.TaskDir`` (report_detail.py:
never through a symbolic link, regular files only), so a link in ``tasks/<key>/`` cannot put another file of
the host into the page. In the page, JSON inside a script element has every ``<``, ``>`` and ``&``
escaped, so no text (``<!--<script>``, ``</script>``) can change where the element ends.
"""

from __future__ import annotations

import contextlib
import html
import json
import os
import pickle
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from anyswe.results.report_detail import detail, page_json, write_chunk

if TYPE_CHECKING:
    import polars as pl

    from anyswe.results.compare import Comparison

#: Past this many tasks the details go to script files beside the page (a folder with an index),
#: loaded as a task is opened: 10,000 tasks inline made a page of about 110 MB to parse at once.
INLINE_TASKS = 2000
CHUNK = 500
#: Unreadable trajectory lines listed above the task table (each task lists all of its own).
MAX_PROBLEMS = 50


class TaskDetails:
    """Each task's detail, begun before the rest of the page is made: in this process up to
    INLINE_TASKS (the page holds them), past it by worker processes, one chunk file each, while this
    one makes the tables and charts. A context manager: leaving it stops the workers."""

    def __init__(self, run: Path, tasks: pl.DataFrame, chunks: Path | None, page_dir: Path | None) -> None:
        # The run directory named may be a link (the user's own): resolved once; nothing in it is followed.
        self.run, self.chunks = run.resolve(), chunks
        page = page_dir.resolve() if page_dir is not None else None
        self.rows = tasks.sort(["instance_id", "cell", "sample"]).to_dicts()
        self._workers: _Workers | None = None
        self._inline: dict[str, Any] = {}
        if chunks is None:
            self._inline = {str(r["key"]): detail(self.run, r, page) for r in self.rows}
            return
        chunks.mkdir(parents=True, exist_ok=True)
        jobs = [
            (self.run, page, self.rows[n : n + CHUNK], chunks / f"tasks-{n // CHUNK}.js")
            for n in range(0, len(self.rows), CHUNK)
        ]
        self._workers = _Workers(jobs)

    def __enter__(self) -> TaskDetails:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._workers is not None:
            self._workers.stop()

    def finish(self) -> tuple[dict[str, int], list[str], str]:
        """Each task's step count, the trajectory lines not read (in the tasks' order), and the page's
        element(s) with the details: the details themselves, or which chunk file holds each task."""
        if self._workers is None or self.chunks is None:
            steps = {k: len(d["steps"]) for k, d in self._inline.items()}
            lost = [p for d in self._inline.values() for p in d["problems"]]
            return steps, lost, f'<script type="application/json" id="task-data">{page_json(self._inline)}</script>'
        steps, lost, index = {}, [], {}
        for n, (part, problems) in enumerate(self._workers.results()):
            steps |= part
            lost += problems
            index.update(dict.fromkeys(part, n))
        where = page_json({"dir": self.chunks.name, "of": index})
        empty = '<script type="application/json" id="task-data">{}</script>'
        return steps, lost, f'{empty}<script type="application/json" id="task-chunks">{where}</script>'


Job = tuple[Path, Path | None, list[dict[str, Any]], Path]


class _Workers:
    """Chunk jobs shared among worker processes, one per core this process may use (none with one).

    Each is ``python -m anyswe.results.report_detail``, its jobs pickled to it: not forked (polars'
    threads run in this process, and a fork copies their locks held), and not through
    multiprocessing, whose children import the caller's main script again (a script calling
    write_report without a ``__main__`` guard would run again in each). Jobs go round-robin (chunks
    are of one size); a worker that fails has its jobs done here instead: the files are the same."""

    def __init__(self, jobs: list[Job]) -> None:
        import subprocess

        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        self.jobs, n = jobs, min(len(jobs), cores)
        self.groups = [jobs[w::n] for w in range(n)] if n > 1 else [jobs]
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * len(self.groups)
        if n <= 1:
            return
        env = dict(os.environ)  # this process's anyswe, wherever it was imported from
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).parents[2]), env.get("PYTHONPATH")]))
        cmd = [sys.executable, "-m", "anyswe.results.report_detail"]
        with contextlib.suppress(OSError):  # none started: the jobs are done here
            self.procs = [
                subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env) for _ in self.groups
            ]
        for proc, group in zip(self.procs, self.groups, strict=True):
            if proc is not None and proc.stdin is not None:
                with contextlib.suppress(OSError), proc.stdin:  # a worker gone: its jobs are done here
                    proc.stdin.write(pickle.dumps(group))

    def results(self) -> list[tuple[dict[str, int], list[str]]]:
        """Each job's result, in the jobs' order."""
        out: list[list[tuple[dict[str, int], list[str]]]] = []
        for proc, group in zip(self.procs, self.groups, strict=True):
            done = None
            if proc is not None and proc.stdout is not None:
                with contextlib.suppress(Exception), proc.stdout:
                    done = pickle.loads(proc.stdout.read())  # our own child's answer
                if proc.wait() != 0:
                    done = None
            out.append(done if done is not None else [write_chunk(job) for job in group])
        n = len(self.groups)
        return [out[i % n][i // n] for i in range(len(self.jobs))]

    def stop(self) -> None:
        for proc in self.procs:
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()


def _verdict(r: dict[str, Any]) -> tuple[str, str]:
    """The verdict the rates count, and the RL mask beside it: an agent timeout is "unresolved,
    RL-masked (agent_timeout)", counted as unresolved; only an untrusted error has no verdict. The
    mask reason is a free string of the row: callers escape the text."""
    from anyswe.execute.decide import UNTRUSTED

    if r.get("error_kind") in UNTRUSTED:
        return f"no verdict ({r['error_kind']})", "masked"
    verdict, cls = ("resolved", "ok") if r["resolved"] else ("unresolved", "no")
    if r["mask_sample"]:
        verdict += f", RL-masked ({r.get('mask_reason') or 'masked'})"
    return verdict, cls


def tasks_section(details: TaskDetails, problems: list[str] | None = None) -> str:
    """The task table, and each task's detail as JSON: in the page, or in chunk files. Above the table,
    each trajectory line that could not be read (file:line: why; also added to ``problems``).

    The table's rows are compact JSON the page's script draws (report_tasks.js: a page of them at
    once, the rest as asked or as the filter finds them): 10,000 rows drawn as HTML made Chromium
    parse and lay out a 6 MB page before the first screen."""
    steps, lost, data = details.finish()
    rows = []
    for r in details.rows:
        verdict, cls = _verdict(r)
        key = str(r["key"])
        rows.append(
            [
                key,
                r["instance_id"],
                r["cell"],
                r["sample"],
                verdict,
                cls,
                steps[key],
                f"{(r.get('time_total') or 0):.1f}",
            ]
        )
    if problems is not None:
        problems += lost
    shown = "".join(f"<li>{html.escape(p)}</li>" for p in lost[:MAX_PROBLEMS])
    more = f"<li>... and {len(lost) - MAX_PROBLEMS} more</li>" if len(lost) > MAX_PROBLEMS else ""
    unread = (
        f'<div class="warn"><p>{len(lost)} trajectory line(s) could not be read; their steps are not shown:</p>'
        f"<ul class=problems>{shown}{more}</ul></div>"
        if lost
        else ""
    )
    return unread + (
        '<p><input id="filter" type="search" placeholder="filter by instance, cell or verdict"> '
        f'<span id="shown">{len(rows)}</span> of {len(rows)} tasks</p>'
        "<table><thead><tr><th>instance</th><th>cell</th><th>sample</th><th>verdict</th><th>steps</th>"
        '<th>seconds</th></tr></thead><tbody id="task-body"></tbody></table>'
        '<p id="more-tasks" style="display:none"><button type="button" id="more"></button></p>'
        f'<script type="application/json" id="task-rows">{page_json(rows)}</script>{data}'
    )


def flips_section(run: Path, tasks: pl.DataFrame, comparisons: list[Comparison]) -> str:
    """Each flipped pair's two tasks side by side, with the triage's verdict if there is one
    (``comparisons``: the page's, by provider; none: nothing to compare)."""
    from anyswe.execute.triage import TABLE, TRIAGE_DIR, find_flips

    if not comparisons:
        return ""
    flips = find_flips(tasks, comparisons=comparisons)
    if not flips:
        return "<p>No flips.</p>"
    table = run / TRIAGE_DIR / TABLE
    triaged = {}
    if table.is_file():
        for f in json.loads(table.read_text()):
            triaged[(f["instance_id"], f["sample"], f["cell_a"], f["cell_b"])] = f
    keys = {(r["cell"], r["instance_id"], r["sample"]): str(r["key"]) for r in tasks.to_dicts()}
    rows = []
    for f in flips:
        t = triaged.get((f.instance_id, f.sample, f.cell_a, f.cell_b))
        kind = t["kind"] if t else "not triaged (anyswe triage)"
        tests = ", ".join(t["tests"]) if t else ""
        side, pair = [], []
        masked = f.rl_masked()
        for cell, resolved in ((f.cell_a, f.resolved_a), (f.cell_b, f.resolved_b)):
            key = keys.get((cell, f.instance_id, f.sample), "")
            pair.append(key)
            label = "resolved" if resolved else "unresolved"
            if cell in masked:  # a flip of the harness rate, none of the RL rate
                label += f", RL-masked ({masked[cell]})"
            side.append(f'<td><a href="#task={html.escape(key)}">{html.escape(cell)}</a>: {html.escape(label)}</td>')
        compare = f'<a class=compare href="#pair={html.escape(",".join(pair))}">side by side</a>'
        rows.append(
            f'<tr class="flip-row"><td>{html.escape(f.instance_id)} #{f.sample}</td>{"".join(side)}'
            f"<td class=kind>{html.escape(kind)}</td><td>{html.escape(tests)}</td><td>{compare}</td></tr>"
        )
    return (
        '<div id="pair" class="pair" style="display:none"></div>'
        "<table><thead><tr><th>instance</th><th>A</th><th>B</th><th>triage</th><th>tests</th><th></th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _asset(name: str) -> str:
    from importlib.resources import files

    return files("anyswe.results").joinpath(name).read_text()


#: The page's script (draws a task when it is first opened, follows ``#task=KEY&step=N``) and style.
SCRIPT = _asset("report_tasks.js")
STYLE = _asset("report_tasks.css")
