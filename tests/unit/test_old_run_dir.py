"""A run directory written before the trajectory contract (results schema 6, trajectory rows with the
whole request body) still reads: its rows, each task's steps, replay and the report.

tests/fixtures/run_before_trajectory_contract is a real run, not a hand-written one: `anyswe apply
specs/agents_demo.yaml` at a9ea6ca (the last commit before the contract) with
`dataset.instance_ids=[demo__calc-1]`, `matrix.providers=[docker]` and the three scripted-model
protocols, on docker. Kept of it: results.jsonl, plan.json, spec.yaml and each task's trajectory,
patch, report and test output (what the readers use; not the agent's own transcript, the cells'
files or tasks.parquet, which the reader rebuilds)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from anyswe.gateway.replay import ReplayModel
from anyswe.gateway.trajectory import read_trajectory
from anyswe.results.report import render_report
from anyswe.results.store import read_results

OLD = Path(__file__).parent.parent / "fixtures" / "run_before_trajectory_contract"


def _run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(OLD, run)  # readers may write beside it (tasks.parquet): never into the repo
    return run


def test_its_rows_read_and_each_tasks_steps_are_the_same_in_all_three_protocols(tmp_path: Path) -> None:
    run = _run(tmp_path)
    rows = read_results(run / "results.jsonl")
    assert len(rows) == 3 and all(r.resolved and r.model_calls == 2 for r in rows)
    neutral = {}
    for row in rows:
        assert row.trajectory_path is not None
        path = run / row.trajectory_path
        steps = read_trajectory(path)
        assert len(steps) == row.model_calls and all(s.protocol for s in steps)
        assert [s.prior_messages for s in steps] == [0, 2]
        assert [m.role for m in steps[0].messages] == ["system", "user"]
        # The reply's tool call, or its command in text (mini-swe-agent's form), and what it then saw.
        assert steps[0].reply is not None and steps[0].tool_results
        assert sum(s.usage.input_tokens for s in steps) == row.input_tokens
        assert len(ReplayModel.load(path).steps) == 2
        neutral[row.model] = [
            ([m.role for m in s.messages], s.reply.text if s.reply else None, [m.text for m in s.tool_results])
            for s in steps
        ]
    assert neutral["scripted-chat"] == neutral["scripted-messages"] == neutral["scripted-responses"]


def test_the_report_shows_each_tasks_steps_and_patch(tmp_path: Path) -> None:
    run = _run(tmp_path)
    html = render_report(run)
    start = html.index('<script type="application/json" id="task-data">') + len(
        '<script type="application/json" id="task-data">'
    )
    details = json.loads(html[start : html.index("</script>", start)])  # what the page renders each task from
    for row in read_results(run / "results.jsonl"):
        task = details[row.key]
        assert len(task["steps"]) == 2
        assert "return a + b" in json.dumps(task)  # the patch
