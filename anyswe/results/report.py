"""One self-contained HTML report of a run: tables, backend comparison, flips, charts, and each task's
trajectory, timings, patch and tests (anyswe/results/report_tasks.py).

Everything is inline (CSS, SVG charts, a few lines of JS): the file works offline, from disk,
with no CDN. Text from the run (patches, logs) is escaped and long outputs are cut.
"""

from __future__ import annotations

import html
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from anyswe.errors import ResultsError
from anyswe.results.compare import Comparison, compare_by
from anyswe.results.report_tasks import INLINE_TASKS, SCRIPT, STYLE, TaskDetails, flips_section, tasks_section
from anyswe.results.tables import cell_table, rates_differ, repo_table, task_frame

if TYPE_CHECKING:
    import polars as pl

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,'DejaVu Sans',sans-serif;margin:24px;color:#1d232a;background:#fbfbfc}
h1{font-size:22px;margin:0 0 4px}
h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #dde1e6;padding-bottom:4px}
.meta{color:#5b6670} table{border-collapse:collapse;margin:6px 0;background:#fff}
th,td{border:1px solid #dde1e6;padding:4px 8px;text-align:left;vertical-align:top} th{background:#f1f3f5}
td.num{text-align:right;font-variant-numeric:tabular-nums} .ok{color:#1a7f37;font-weight:600} .no{color:#b42318}
.masked{color:#8a6d00} pre{white-space:pre-wrap;max-height:420px;overflow:auto;background:#f6f8fa;padding:8px;
border:1px solid #dde1e6;font-size:12px} details summary{cursor:pointer} input#filter{padding:4px 8px;width:320px}
.flip{font-family:monospace;font-size:12px} svg text{font:12px system-ui,'DejaVu Sans',sans-serif}
"""


def _e(x: Any) -> str:
    return html.escape("" if x is None else str(x))


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3f}"
    return _e(v)


def _table(rows: list[dict[str, Any]], cols: list[str]) -> str:
    head = "".join(f"<th>{_e(c)}</th>" for c in cols)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="num">{_fmt(r.get(c))}</td>'
            if isinstance(r.get(c), (int, float))
            else f"<td>{_fmt(r.get(c))}</td>"
            for c in cols
        )
        + "</tr>"
        for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def rate_chart(cells: list[dict[str, Any]]) -> str:
    """Horizontal bars: resolve rate per cell with its 95% Wilson interval, and the RL rate (a
    diamond, and its figure) on the cells where it differs."""
    left, width, bar_h, gap = 230, 420, 18, 10
    height = 30 + len(cells) * (bar_h + gap)
    both = rates_differ(cells)
    label_w = 140 if both else 60
    parts = [f'<svg role="img" aria-label="resolve rate per cell" width="{left + width + label_w}" height="{height}">']
    for x in (0, 0.25, 0.5, 0.75, 1.0):
        px = left + x * width
        parts.append(f'<line x1="{px}" y1="10" x2="{px}" y2="{height - 18}" stroke="#e3e6ea"/>')
        parts.append(f'<text x="{px}" y="{height - 4}" text-anchor="middle">{x:.2f}</text>')
    for i, c in enumerate(cells):
        y = 14 + i * (bar_h + gap)
        rate = c.get("resolve_rate") or 0.0
        lo, hi = c.get("ci_low") or 0.0, c.get("ci_high") or 0.0
        parts.append(f'<text x="{left - 8}" y="{y + 13}" text-anchor="end">{_e(c["cell"])}</text>')
        parts.append(f'<rect x="{left}" y="{y}" width="{rate * width:.1f}" height="{bar_h}" fill="#4c78a8"/>')
        parts.append(
            f'<line x1="{left + lo * width:.1f}" y1="{y + bar_h / 2}" x2="{left + hi * width:.1f}" '
            f'y2="{y + bar_h / 2}" stroke="#1d232a" stroke-width="2"/>'
        )
        for edge in (lo, hi):
            parts.append(
                f'<line x1="{left + edge * width:.1f}" y1="{y + 3}" x2="{left + edge * width:.1f}" '
                f'y2="{y + bar_h - 3}" stroke="#1d232a" stroke-width="2"/>'
            )
        label = f"{rate:.2f}"
        rl = c.get("rl_rate")
        if rates_differ([c]) and rl is not None:
            x, mid = left + rl * width, y + bar_h / 2
            diamond = f"M{x:.1f} {mid - 6:.1f} L{x + 6:.1f} {mid:.1f} L{x:.1f} {mid + 6:.1f} L{x - 6:.1f} {mid:.1f} Z"
            parts.append(
                f'<path d="{diamond}" fill="#f58518" stroke="#1d232a">'
                f"<title>RL rate (unmasked samples): {rl:.2f}</title></path>"
            )
            label += f" (RL {rl:.2f})"
        parts.append(f'<text x="{left + width + 8}" y="{y + 13}">{label}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _heat_color(v: float | None) -> str:
    if v is None:
        return "#eeeeee"
    # white -> blue
    r, g, b = (int(255 - (255 - t) * v) for t in (76, 120, 168))
    return f"rgb({r},{g},{b})"


def _heatmap(repo_rows: list[dict[str, Any]]) -> str:
    """Repos x cells, coloured by resolve rate."""
    repos = sorted({str(r["repo"]) for r in repo_rows})
    cells = sorted({str(r["cell"]) for r in repo_rows})
    value = {(str(r["repo"]), str(r["cell"])): r.get("resolve_rate") for r in repo_rows}
    left, top, cw, ch = 200, 120, 70, 24
    w, h = left + cw * len(cells) + 120, top + ch * len(repos) + 10  # room for the last rotated label
    parts = [f'<svg role="img" aria-label="resolve rate per repo and cell" width="{w}" height="{h}">']
    for j, cell in enumerate(cells):
        x = left + j * cw + cw / 2
        parts.append(f'<text transform="translate({x},{top - 6}) rotate(-40)">{_e(cell)}</text>')
    for i, repo in enumerate(repos):
        y = top + i * ch
        parts.append(f'<text x="{left - 8}" y="{y + 16}" text-anchor="end">{_e(repo)}</text>')
        for j, cell in enumerate(cells):
            v = value.get((repo, cell))
            label = "" if v is None else f"{v:.2f}"
            parts.append(
                f'<rect x="{left + j * cw}" y="{y}" width="{cw - 2}" height="{ch - 2}" fill="{_heat_color(v)}">'
                f"<title>{_e(repo)} / {_e(cell)}: {label or 'n/a'}</title></rect>"
            )
            fill = "#fff" if v is not None and v > 0.6 else "#1d232a"
            parts.append(
                f'<text x="{left + j * cw + cw / 2 - 1}" y="{y + 16}" text-anchor="middle" fill="{fill}">{label}</text>'
            )
    parts.append("</svg>")
    return "".join(parts)


def _backend_pairs(items: list[Comparison]) -> str:
    """``: docker vs apptainer``: the providers compared, from the run's own rows."""
    return ": " + ", ".join(f"{c.a} vs {c.b}" for c in items) if items else ""


def _comparisons(items: list[Comparison]) -> str:
    if not items:
        return "<p>Only one backend in this run: nothing to compare.</p>"
    rows = []
    for c in items:
        d = c.to_json()
        d["flips A-only"] = ", ".join(c.flips["resolved_only_in_a"]["instance_ids"]) or "none"
        d["flips B-only"] = ", ".join(c.flips["resolved_only_in_b"]["instance_ids"]) or "none"
        rows.append(d)
    cols = [
        "a",
        "b",
        "pairs",
        "errored_pairs",
        "masked_pairs",
        "agreement",
        "rate_a",
        "rate_b",
        "delta",
        "ci_low",
        "ci_high",
        "p_value",
        "flips A-only",
        "flips B-only",
    ]
    if any(c.rates_differ for c in items):  # the RL view, only where it is not the same
        at = cols.index("rate_b") + 1
        cols[at:at] = ["rl_pairs", "rl_rate_a", "rl_rate_b"]
    warnings = "".join(f'<p class="warn">warning: {_e(w)}</p>' for c in items for w in c.warnings)
    return warnings + _table(rows, cols)


def _exclusions(plan: dict[str, Any]) -> str:
    """The instances left out on every provider, and why (a gold-check's exclusion list)."""
    excluded: dict[str, str] = plan.get("excluded") or {}
    if not excluded:
        return ""
    files = ", ".join(plan.get("exclusion_files") or []) or "dataset.exclude"
    rows = "".join(f"<tr><td>{_e(i)}</td><td>{_e(r)}</td></tr>" for i, r in sorted(excluded.items()))
    return (
        f'<div id="excluded"><p><b>{len(excluded)} instance(s) excluded on every provider</b> ({_e(files)}); '
        "they are in no cell's counts.</p>"
        f"<table><thead><tr><th>instance</th><th>reason</th></tr></thead><tbody>{rows}</tbody></table></div>"
    )


def render_report(run_dir: str | Path, *, chunks: Path | None = None, problems: list[str] | None = None) -> str:
    """The HTML text of the report for ``run_dir`` (its tasks' details in files in ``chunks`` if given;
    each trajectory line it could not read, file:line: why, added to ``problems``)."""
    run = Path(run_dir)
    tasks = task_frame(run)
    with TaskDetails(run, tasks, chunks, None) as details:
        return _page(run, tasks, details, problems)


#: The cell table's columns, in order (the RL columns go after ``masked`` where the rates differ).
CELL_COLUMNS = (
    "cell",
    "tasks",
    "resolved",
    "scored",
    "resolve_rate",
    "ci_low",
    "ci_high",
    "masked",
    "patch_rate",
    "apply_failures",
    "flagged",
    "mean_time_agent",
    "mean_time_grading",
    "mean_time_total",
)


def _page(run: Path, tasks: pl.DataFrame, details: TaskDetails, problems: list[str] | None = None) -> str:
    """The page: its tables and charts made while ``details``' workers (if any) read the tasks."""
    cells = cell_table(tasks).to_dicts()
    plan = json.loads((run / "plan.json").read_text()) if (run / "plan.json").is_file() else {}
    try:
        comparisons = compare_by(tasks, "provider")
    except ResultsError:
        comparisons = []
    cell_cols = list(CELL_COLUMNS)
    if rates_differ(cells):  # the RL rate beside the harness rate, only where they differ
        at = cell_cols.index("masked") + 1
        cell_cols[at:at] = ["rl_resolved", "rl_scored", "rl_rate"]
    title = f"anyswe report: {plan.get('spec', run.name)}"
    generated = datetime.now(UTC).isoformat(timespec="seconds")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_e(title)}</title><style>{_CSS}{STYLE}</style></head>
<body>
<h1>{_e(title)}</h1>
<p class="meta">run directory {_e(run)} &middot; {tasks.height} tasks &middot; dataset {_e(plan.get("dataset", "?"))}
&middot; generated {_e(generated)}</p>
<h2>Cells</h2>
<p>Rates count what the official harness counts: every task that ran and ended is scored as its tests said,
whatever ended it (an agent timeout, a step limit, a crash); only infra, grading and internal errors leave it out.
Intervals are 95% Wilson. Where some sample is masked for training (an agent timeout, a resolve after a forced stop),
<code>rl_rate</code> is the rate over unmasked samples only, as a trainer's reward sees it.</p>
{_exclusions(plan)}
{_table(cells, [c for c in cell_cols if c in (cells[0] if cells else {})])}
<h2>Resolve rate per cell</h2>
{rate_chart(cells)}
<h2>Between backends{_e(_backend_pairs(comparisons))}</h2>
<p>Pairs of the same agent, model, instance and sample, both sides with a verdict (<code>errored_pairs</code>: a
side had an infra, grading or internal error); delta is B - A with a paired bootstrap 95% interval;
p is the exact McNemar test with one sample per instance; with several, the interval resamples instances and p is a
sign-flip test on per-instance mean differences (samples of one instance are not independent).</p>
{_comparisons(comparisons)}
<h2>Flips between backends</h2>
<p>Each flipped pair's two tasks, and what <code>anyswe triage</code> found it to be (flaky, backend-systematic,
agent variance) if it ran.</p>
{flips_section(run, tasks, comparisons)}
<h2>Resolve rate per repo</h2>
{_heatmap(repo_table(tasks).to_dicts())}
<h2>Tasks</h2>
{tasks_section(details, problems)}
<script>{SCRIPT}</script>
</body></html>
"""


def write_report(run_dir: str | Path, out: str | Path, *, problems: list[str] | None = None) -> Path:
    """Write the report to ``out``. A run of more than INLINE_TASKS tasks keeps their details in
    ``<out's name>_tasks/`` beside it (the page loads a task's file when it is opened). A trajectory
    line that cannot be read is shown in the page (file:line: why) and added to ``problems``."""
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    tasks = task_frame(run_dir)
    chunks = path.parent / f"{path.stem}_tasks" if tasks.height > INLINE_TASKS else None
    with TaskDetails(Path(run_dir), tasks, chunks, path.parent) as details:
        path.write_text(_page(Path(run_dir), tasks, details, problems))
    return path
