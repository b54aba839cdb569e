"""Tables for a terminal. The first column (a cell, a repo, an instance) is never cut; the default
view of a run's results fits :data:`WIDTH` columns, keeping the columns that matter most, and
``--wide`` shows every column at its full width.

Before, every column of the cell table went to the console, which cut each one to fit: the cell,
the one column that says what a row is, read "gold.non…" on a 200-column terminal.
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping, Sequence
from typing import Any

#: What the default view fits: a terminal of 100 columns.
WIDTH = 100

#: The default view's columns, most wanted first; the last ones go first when the view is too wide.
PRIORITY = (
    "cell",
    "repo",
    "resolved",
    "rate",
    "95% CI",
    # When the RL rate differs it says more than the count of masked samples that explains it.
    "rl_rate",
    "masked",
    "rl",
    "flagged",
    "time_s",
    "tokens",
    "cost_usd",
    "patch%",
    "apply_fail",
    "calls",
)


_FIGURE = re.compile(r"[\d.,/%-]*")


def _numeric(values: list[object]) -> bool:
    """Whether a column holds figures (numbers, or text such as "2/3" or "0.34-1.00"): right-justified."""
    return all(isinstance(v, (int, float)) or (isinstance(v, str) and _FIGURE.fullmatch(v)) for v in values)


def _text(value: object) -> str:
    if value is None:
        return ""
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def summary(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, object]]:
    """Rows of a cell or repo table (:mod:`anyswe.results.tables`) as the default view has them: the
    RL rate (unmasked samples) beside the harness rate only when some row's differs, so that a
    table of runs with no agent timeout or forced stop reads as before."""
    from anyswe.results.tables import rates_differ

    both = rates_differ(rows)
    out: list[dict[str, object]] = []
    for r in rows:
        low, high = r.get("ci_low"), r.get("ci_high")
        tokens = (r.get("input_tokens") or 0) + (r.get("output_tokens") or 0)
        view: dict[str, object] = {"cell": r["cell"]}
        if "repo" in r:
            view["repo"] = r["repo"]
        view |= {
            "resolved": f"{r['resolved']}/{r['scored']}",
            "rate": r.get("resolve_rate"),
            "95% CI": "" if low is None or high is None else f"{low:.2f}-{high:.2f}",
            "masked": r.get("masked"),
        }
        if both:
            view |= {"rl": f"{r.get('rl_resolved')}/{r.get('rl_scored')}", "rl_rate": r.get("rl_rate")}
        view |= {
            "flagged": r.get("flagged"),
            "time_s": None if r.get("mean_time_total") is None else f"{r['mean_time_total']:.1f}",
            "tokens": tokens,
            "cost_usd": r.get("cost_usd"),
            "patch%": r.get("patch_rate"),
            "apply_fail": r.get("apply_failures"),
            "calls": r.get("model_calls"),
        }
        out.append(view)
    return out


def fit(rows: list[dict[str, object]], width: int = WIDTH) -> list[dict[str, object]]:
    """``rows`` without their least wanted columns (:data:`PRIORITY`) until they fit ``width``; the
    first column always stays, whole."""
    if not rows:
        return rows
    columns = list(rows[0])
    while len(columns) > 1 and natural_width(rows, columns) > width:
        droppable = [c for c in columns[1:] if c in PRIORITY] or columns[1:]
        columns.remove(max(droppable, key=lambda c: PRIORITY.index(c) if c in PRIORITY else len(PRIORITY)))
    return [{c: r[c] for c in columns} for r in rows]


def numbered(rows: list[dict[str, object]], width: int = WIDTH) -> tuple[list[dict[str, object]], list[str]]:
    """A matrix whose column names (cells) are too wide for ``width``: the columns numbered c1..cN,
    and the legend lines that name each in full."""
    if not rows or natural_width(rows, list(rows[0])) <= width:
        return rows, []
    first, *rest = rows[0]
    names = {c: f"c{n}" for n, c in enumerate(rest, 1)}
    return [{first: r[first], **{names[c]: r[c] for c in rest}} for r in rows], [f"{v} = {k}" for k, v in names.items()]


def _table(rows: Sequence[Mapping[str, object]], columns: Sequence[str], title: str | None) -> Any:
    from rich import box
    from rich.table import Table

    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left")
    for col in columns:
        figures = _numeric([r[col] for r in rows if r[col] is not None])
        table.add_column(str(col), justify="right" if figures else "left", no_wrap=True)
    for row in rows:
        table.add_row(*(_text(row[c]) for c in columns))
    return table


def natural_width(rows: Sequence[Mapping[str, object]], columns: Sequence[str]) -> int:
    """How wide the table is when no column is cut."""
    from rich.console import Console
    from rich.measure import Measurement

    console = Console(width=10_000, file=io.StringIO())
    return Measurement.get(console, console.options, _table(rows, columns, None)).maximum


def render(rows: Sequence[Mapping[str, object]], title: str | None = None, *, file: Any = None) -> None:
    """Print ``rows`` as a table at its full width (nothing is cut), or "(nothing)"."""
    from rich.console import Console

    if not rows:
        Console(file=file).print("(nothing)")
        return
    columns = list(rows[0])
    # As wide as the table needs: a narrower console would cut columns (the terminal wraps instead).
    Console(width=max(natural_width(rows, columns), len(title or "")), file=file).print(_table(rows, columns, title))
