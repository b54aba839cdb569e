"""`anyswe results` on a terminal (issue 22, item 6): the cell is never cut, the default view fits
100 columns, ``--wide`` shows every column, and an instance matrix too wide names its cells in a
legend. Through the real CLI, on a results.jsonl of TaskResult rows."""

from __future__ import annotations

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from anyswe.cli import app
from anyswe.results.schema import TaskResult

#: Names as real matrices make them (agent.model.provider), long enough that the old view cut them.
CELLS = [
    ("mini-swe-agent", "claude-sonnet-4-5-20250929", "apptainer"),
    ("mini-swe-agent", "claude-sonnet-4-5-20250929", "docker"),
    ("claude-code", "qwen3-coder-480b-a35b-instruct", "apptainer"),
]
IDS = ["astropy__astropy-12907", "django__django-11099", "sympy__sympy-20590"]


def _run(tmp_path: Path, cells: list[tuple[str, str, str]] = CELLS) -> Path:
    lines = []
    for n, (agent, model, provider) in enumerate(cells):
        for k, iid in enumerate(IDS):
            row = TaskResult.model_validate(
                {
                    "key": f"{n:016x}__{iid}",
                    "cell": f"{agent}.{model}.{provider}",
                    "agent": agent,
                    "model": model,
                    "provider": provider,
                    "instance_id": iid,
                    "repo": iid.split("__")[0],
                    "tests_resolved": (n + k) % 2 == 0,
                    "resolved": (n + k) % 2 == 0,
                    "patch_exists": True,
                    "input_tokens": 123_456,
                    "output_tokens": 7_890,
                    "time_total": 412.5,
                    "flags": ["conftest"] if k == 0 else [],
                }
            )
            lines.append(row.model_dump_json())
    (tmp_path / "results.jsonl").write_text("\n".join(lines) + "\n")
    return tmp_path


def _results(run: Path, *args: str) -> list[str]:
    r = CliRunner().invoke(app, ["results", str(run), *args], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    return r.output.splitlines()


def _header(lines: list[str]) -> list[str]:
    line = next(x for x in lines if x.strip().startswith(("cell", "instance_id")))
    return re.split(r"\s{2,}", line.strip())


def test_the_default_view_fits_100_columns_and_never_cuts_a_cell(tmp_path: Path) -> None:
    run = _run(tmp_path)
    for by in ("cell", "repo"):
        lines = _results(run, "--by", by)
        assert max(len(x.rstrip()) for x in lines) <= 100, "\n".join(lines)
        text = "\n".join(lines)
        assert "…" not in text
        for agent, model, provider in CELLS:
            assert f"{agent}.{model}.{provider}" in text
        # The columns that matter most stay: resolved (of scored), the rate and its interval.
        assert _header(lines)[:4] == (
            ["cell", "resolved", "rate", "95% CI"] if by == "cell" else ["cell", "repo", "resolved", "rate"]
        )
    cell = next(x for x in _results(run) if x.strip().startswith("mini-swe-agent.claude-sonnet-4-5-20250929.docker"))
    assert re.split(r"\s{2,}", cell.strip())[1:4] == ["1/3", "0.333", "0.06-0.79"], cell


def test_wide_shows_every_column_whole(tmp_path: Path) -> None:
    run = _run(tmp_path)
    lines = _results(run, "--wide")
    expected = json.loads(CliRunner().invoke(app, ["results", str(run), "--json"]).output.splitlines()[0])
    assert _header(lines) == list(expected)
    assert "…" not in "\n".join(lines) and max(len(x.rstrip()) for x in lines) > 100


def test_a_cell_wider_than_the_view_is_still_whole(tmp_path: Path) -> None:
    long = ("an-agent-with-a-very-long-name-" * 2, "a-model-whose-name-goes-on-and-on-" * 2, "docker")
    lines = _results(_run(tmp_path, [long]))
    assert ".".join(long) in "\n".join(lines)
    assert _header(lines)[0] == "cell"


def test_a_wide_instance_matrix_names_its_cells_in_a_legend(tmp_path: Path) -> None:
    run = _run(tmp_path)
    lines = _results(run, "--by", "instance")
    assert _header(lines) == ["instance_id", "c1", "c2", "c3"]
    assert max(len(x.rstrip()) for x in lines) <= 100
    legend = dict(x.split(" = ") for x in lines if " = " in x)
    assert sorted(legend.values()) == sorted(".".join(c) for c in CELLS)
    assert _header(_results(run, "--by", "instance", "--wide"))[1:] == sorted(".".join(c) for c in CELLS)


def _time_out_first(run: Path) -> TaskResult:
    """Make the first row an agent timeout (its verdict, reward and mask as decide() gives them); returns it."""
    import dataclasses

    from anyswe.agents.base import ExitReason
    from anyswe.execute.outcome import Exit, Outcome

    rows = [TaskResult.model_validate_json(x) for x in (run / "results.jsonl").read_text().splitlines()]
    timed_out = Exit(ExitReason.TIMEOUT, timed_out=True, by="host")
    rows[0] = dataclasses.replace(Outcome.of_row(rows[0]), exit=timed_out).row()
    (run / "results.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in rows))
    return rows[0]


def test_the_rl_rate_is_shown_beside_the_harness_rate_only_where_they_differ(tmp_path: Path) -> None:
    """Issue 31, 6: an agent timeout counts in the rate (as its tests said) and leaves the RL rate."""
    run = _run(tmp_path, [("a", "m", "docker")])
    assert "rl_rate" not in _header(_results(run))  # nothing masked: one rate
    row = _time_out_first(run)
    assert row.resolved and row.mask_reason == "agent_timeout"
    lines = _results(run)
    assert _header(lines)[:7] == ["cell", "resolved", "rate", "95% CI", "masked", "rl", "rl_rate"]
    # Resolved by its tests, so 2 of 3 for the harness; 1 of the 2 unmasked for RL.
    (first,) = (x for x in lines if x.strip().startswith("a.m.docker"))
    assert re.split(r"\s{2,}", first.strip())[1:7] == ["2/3", "0.667", "0.21-0.94", "1", "1/2", "0.500"], first


def test_a_view_too_narrow_for_both_keeps_the_rl_rate_before_the_masked_count(tmp_path: Path) -> None:
    run = _run(tmp_path)
    row = _time_out_first(run)
    lines = _results(run)
    assert max(len(x.rstrip()) for x in lines) <= 100
    assert _header(lines) == ["cell", "resolved", "rate", "95% CI", "rl_rate"]
    first = next(x for x in lines if x.strip().startswith(row.cell))
    assert re.split(r"\s{2,}", first.strip())[1:5] == ["2/3", "0.667", "0.21-0.94", "0.500"], first
