"""The report shows the harness rate, and the RL rate beside it where they differ (issue 31, item 6):
an agent timeout is counted as its tests said, and named as masked for RL, in the cell table, the
chart, the backend comparison, the flips and the task list."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from anyswe.agents.base import ExitReason
from anyswe.execute.outcome import Exit, Outcome
from anyswe.results.report import render_report
from anyswe.results.schema import TaskResult


def _run(tmp_path: Path, *, time_out: bool, passed: bool = False) -> Path:
    rows = []
    for provider in ("docker", "apptainer"):
        for n, iid in enumerate(("demo__a-1", "demo__b-2")):
            resolved = n == 0 or (passed and provider == "apptainer")
            row = TaskResult(
                # A task key's shape (16 hex digits, then the instance id): the report reads rows strictly.
                key=("d0" if provider == "docker" else "a0") * 8 + f"__{iid}",
                cell=f"g.none.{provider}",
                agent="g",
                provider=provider,
                provider_type=provider,
                instance_id=iid,
                repo="demo",
                tests_resolved=resolved,
                resolved=resolved,
                reward=float(resolved),
                patch_exists=True,
                patch_applied=True,
            )
            if time_out and provider == "apptainer" and n == 1:
                # The agent ran out of time (on a task its tests fail unless ``passed``): decide()
                # masks it for RL and gives its reward.
                timed_out = Exit(ExitReason.TIMEOUT, timed_out=True, by="host")
                row = dataclasses.replace(Outcome.of_row(row), exit=timed_out).row()
            rows.append(row)
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in rows))
    return run


def _table(section: str) -> list[dict[str, str]]:
    """The first HTML table of ``section`` as rows of header -> cell text."""
    head = re.findall(r"<th>(.*?)</th>", section.split("</thead>", 1)[0])
    body = section.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    return [dict(zip(head, re.findall(r"<td[^>]*>(.*?)</td>", tr), strict=True)) for tr in body.split("</tr>")[:-1]]


def test_a_run_with_an_agent_timeout_shows_both_rates(tmp_path: Path) -> None:
    page = render_report(_run(tmp_path, time_out=True))
    cells = {r["cell"]: r for r in _table(page[page.index("<h2>Cells</h2>") :])}
    # Both cells resolve 1 of 2 for the harness; the timed-out one is 1 of 1 for RL.
    got = {c: (r["resolved"], r["scored"], r["resolve_rate"], r["rl_scored"], r["rl_rate"]) for c, r in cells.items()}
    assert got == {
        "g.none.apptainer": ("1", "2", "0.500", "1", "1.000"),
        "g.none.docker": ("1", "2", "0.500", "2", "0.500"),
    }
    assert "(RL 1.00)" in page and "RL rate (unmasked samples)" in page
    (diff,) = _table(page[page.index("<h2>Between backends: g.none.docker vs g.none.apptainer</h2>") :])
    assert (diff["pairs"], diff["errored_pairs"], diff["rl_pairs"], diff["delta"]) == ("2", "0", "1", "0.000")
    assert (diff["rate_a"], diff["rate_b"], diff["rl_rate_a"], diff["rl_rate_b"]) == (
        "0.500",
        "0.500",
        "1.000",
        "1.000",
    )
    # The harness sees no flip: both sides failed demo__b-2.
    assert "No flips." in page
    assert "unresolved, RL-masked (agent_timeout)" in page


def test_a_flip_with_a_timed_out_side_is_a_flip_and_says_it_is_masked_for_rl(tmp_path: Path) -> None:
    page = render_report(_run(tmp_path, time_out=True, passed=True))
    (flip,) = _table(page[page.index("<h2>Flips between backends</h2>") :])
    assert flip["instance"] == "demo__b-2 #0"
    assert flip["B"].endswith("g.none.apptainer</a>: resolved, RL-masked (agent_timeout)"), flip
    (diff,) = _table(page[page.index("<h2>Between backends: g.none.docker vs g.none.apptainer</h2>") :])
    assert (diff["rate_a"], diff["rate_b"], diff["flips B-only"]) == ("0.500", "1.000", "demo__b-2")


def test_a_run_without_rl_masks_shows_one_rate(tmp_path: Path) -> None:
    page = render_report(_run(tmp_path, time_out=False))
    (cell, _) = _table(page[page.index("<h2>Cells</h2>") :])
    assert "resolve_rate" in cell and "rl_rate" not in cell
    assert "(RL " not in page and "<th>rl_pairs</th>" not in page and "RL-masked" not in page
