"""The report's tasks: one row per task, whose detail is drawn when it is opened.

Each task's detail (its trajectory as steps, phase-timing bars, the patch highlighted, the
FAIL_TO_PASS and PASS_TO_PASS results, the test output) is JSON in the page, and the page's script
draws it the first time the task is opened: a report of 10,000 tasks opens as a table, not as
10,000 drawn trajectories. ``#task=KEY&step=N`` in the address opens that task and step. Flipped
pairs, with the triage's verdict when ``anyswe triage`` ran, link their two tasks side by side.
Text from the run is put in the page as JSON (the script sets it as text, never as HTML) and long
texts are cut.

A run directory is read as untrusted: its rows are validated strictly, a key must be a task key
(results/schema.py), and a task's files are read only through ``_files.read_task_file`` (never
through a symbolic link, regular files only), so a link in ``tasks/<key>/`` cannot put another file of
the host into the page. In the page, JSON inside a script element has every ``<``, ``>`` and ``&``
escaped, so no text (``<!--<script>``, ``</script>``) can change where the element ends.
"""

from __future__ import annotations

import html
import json
import os
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from anyswe._files import read_task_file
from anyswe.errors import ResultsError
from anyswe.results.schema import PHASE_FIELDS

if TYPE_CHECKING:
    import polars as pl

#: Characters kept of each text (a patch, a log, a message).
MAX_TEXT = 20_000
#: Past this many tasks the details go to script files beside the page (a folder with an index),
#: loaded as a task is opened: 10,000 tasks inline made a page of about 110 MB to parse at once.
INLINE_TASKS = 2000
CHUNK = 500
#: Unreadable trajectory lines listed above the task table (each task lists all of its own).
MAX_PROBLEMS = 50
#: The most read of a trajectory (its steps are drawn, each text cut); other files: _files.READ_LIMIT.
TRAJECTORY_LIMIT = 256 * 1024 * 1024


def _cut(text: str, limit: int = MAX_TEXT) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n... ({len(text) - limit} more characters)"


def _file(run: Path, rel: str, **kw: Any) -> str | None:
    """The text of ``run/rel`` as :func:`~anyswe._files.read_task_file` reads it (no link followed at
    any step; a refusal is a one-line note); None when it is not there or ``rel`` leads out of ``run``."""
    try:
        return read_task_file(run, rel, **kw)
    except ValueError:  # absolute, or through ".."
        return None


def _read(run: Path, rel: str) -> str:
    return _cut(_file(run, rel) or "")


def _steps(run: Path, key: str, row: dict[str, Any], problems: list[str]) -> list[dict[str, Any]]:
    """The task's trajectory as the page draws it (read through the one reader); each line it cannot
    read (file:line: why) goes to ``problems``."""
    from anyswe.agents import transcript_readers
    from anyswe.gateway.trajectory import read_trajectory

    rel = str(row.get("trajectory_path") or f"tasks/{key}/trajectory.jsonl")
    text = _file(run, rel, limit=TRAJECTORY_LIMIT, errors="surrogateescape")  # a bad byte: its line's problem
    if text is None:
        return []
    beside = PurePosixPath(rel).parent
    # Only the transcripts the task has (one listing, not an attempt per agent type that keeps one); each is
    # still read without following a link.
    try:
        present = set(os.listdir(run / beside))
    except OSError:
        present = set()
    names = [n for n in transcript_readers() if n in present]
    transcripts = {n: t for n in names if (t := _file(run, str(beside / n))) is not None}
    steps = read_trajectory(run / rel, transcripts, problems=problems, text=text)

    def msg(m: Any) -> list[Any]:
        return [m.role, _cut(m.text, 4000), [[c.name, json.dumps(c.arguments)[:2000]] for c in m.tool_calls]]

    out = []
    for s in steps:
        reply = s.reply
        out.append(
            {
                "refused": None if s.refused is None else str(s.refused),
                "in": s.usage.input_tokens,
                "out": s.usage.output_tokens,
                "s": s.latency_s,
                "cost": s.cost_usd,
                "messages": [msg(m) for m in s.messages],
                "text": "" if reply is None else _cut(reply.text, 4000),
                "reasoning": "" if reply is None else _cut(reply.reasoning or "", 4000),
                "calls": [] if reply is None else [[c.name, json.dumps(c.arguments)[:2000]] for c in reply.tool_calls],
                "stop": None if reply is None else reply.stop,
                "results": [[_cut(m.text, 4000), bool(m.is_error)] for m in s.tool_results],
            }
        )
    return out


def _tests(run: Path, key: str) -> dict[str, Any]:
    try:
        data = json.loads(_file(run, f"tasks/{key}/report.json") or "{}")
    except json.JSONDecodeError:  # a refusal's note, too
        return {}
    entry: dict[str, Any] = next(iter(data.values()), {}) if isinstance(data, dict) else {}
    return entry.get("tests_status") or {}


def detail(run: Path, row: dict[str, Any], page_dir: Path | None = None) -> dict[str, Any]:
    """What the page draws when a task is opened (``row``: a validated TaskResult's, its key a task key;
    ``problems``: what of its trajectory could not be read; ``atif``: a link to its ATIF export, from
    the page's directory ``page_dir``, once ``anyswe export atif`` wrote one)."""
    run, key = run.resolve(), str(row["key"])  # the run directory named may be a link; nothing in it is followed
    problems: list[str] = []
    atif = run / "atif" / f"{key}.json"
    return {
        "atif": _href(atif, page_dir) if atif.is_file() else "",
        "meta": f"applied by: {row.get('applied_by') or 'not applied'}; exit: {row.get('exit_reason')}; "
        f"error: {row.get('error') or 'none'}; flags: {', '.join(row.get('flags') or []) or 'none'}",
        "phases": [[p.removeprefix("time_"), row.get(p) or 0.0] for p in PHASE_FIELDS],
        "patch": _read(run, f"tasks/{key}/patch.diff"),
        "tests": _tests(run, key),
        "output": _read(run, f"tasks/{key}/test_output.txt"),
        "steps": _steps(run, key, row, problems),
        "problems": problems,
    }


def _href(target: Path, page_dir: Path | None) -> str:
    """A link to a local file: relative to the page where it is known (the pair can move together)."""
    import os
    from urllib.parse import quote

    if page_dir is None:
        return target.as_uri()
    return quote(os.path.relpath(target, page_dir.resolve()))


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


def _data(details: dict[str, Any], chunks: Path | None) -> str:
    """The details in the page, or in ``chunks/tasks-N.js`` files and an index of which holds which."""
    if chunks is None:
        return f'<script type="application/json" id="task-data">{_json(details)}</script>'
    chunks.mkdir(parents=True, exist_ok=True)
    keys, index = list(details), {}
    for n in range(0, len(keys), CHUNK):
        part = {k: details[k] for k in keys[n : n + CHUNK]}
        (chunks / f"tasks-{n // CHUNK}.js").write_text(f"anysweTasks({_json(part)});\n")
        index.update(dict.fromkeys(part, n // CHUNK))
    where = _json({"dir": chunks.name, "of": index})
    empty = '<script type="application/json" id="task-data">{}</script>'
    return f'{empty}<script type="application/json" id="task-chunks">{where}</script>'


def _json(value: Any) -> str:
    """``value`` as JSON that is safe inside a script element: the HTML parser ends one at ``</script``
    and, after ``<!--``, treats ``<script`` as opening a nested one (then the page's own ``</script>``
    no longer ends it and no script of the page runs). JSON has ``<``, ``>`` and ``&`` only inside
    strings, where their escapes mean the same."""
    return json.dumps(value).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def tasks_section(
    run: Path,
    tasks: pl.DataFrame,
    chunks: Path | None = None,
    problems: list[str] | None = None,
    page_dir: Path | None = None,
) -> str:
    """The task table, and each task's detail as JSON: in the page, or in files in ``chunks``. Above the
    table, each trajectory line that could not be read (file:line: why; also added to ``problems``)."""
    rows, details = [], {}
    lost: list[str] = []
    for r in tasks.sort(["instance_id", "cell", "sample"]).to_dicts():
        verdict, cls = _verdict(r)
        key = str(r["key"])
        details[key] = detail(run, r, page_dir)
        lost += details[key]["problems"]
        search = html.escape(f"{r['instance_id']} {r['cell']} {verdict}".lower(), quote=True)
        label = html.escape(f"{r['cell']} · {r['instance_id']} #{r['sample']} · {verdict}", quote=True)
        rows.append(
            f'<tr class="task" data-key="{html.escape(key, quote=True)}" data-search="{search}" '
            f'data-label="{label}">'
            f'<td><details class="task" data-key="{html.escape(key, quote=True)}"><summary>'
            f"{html.escape(r['instance_id'])}</summary><div class=detail></div></details></td>"
            f"<td>{html.escape(r['cell'])}</td><td class=num>{r['sample']}</td>"
            f"<td class={cls}>{html.escape(verdict)}</td>"
            f"<td class=num>{len(details[key]['steps'])}</td><td class=num>{(r.get('time_total') or 0):.1f}</td></tr>"
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
        f"<th>seconds</th></tr></thead><tbody>{''.join(rows)}</tbody></table>" + _data(details, chunks)
    )


def flips_section(run: Path, tasks: pl.DataFrame) -> str:
    """Each flipped pair's two tasks side by side, with the triage's verdict if there is one."""
    from anyswe.execute.triage import TABLE, TRIAGE_DIR, find_flips

    try:
        flips = find_flips(tasks)
    except ResultsError:
        return ""
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
