"""How anyswe's trajectory steps map onto ATIF v1.8 where the agents' runs do not reach: a call the
gateway refused, a tool result with no call of that id, cached tokens, and the policy's token ids
and log-probs (the runs: tests/e2e/test_cli_agents.py and test_token_capture.py)."""

from __future__ import annotations

from atif import Trajectory

from anyswe.gateway.trajectory import Step, StepMessage, StepReply, StepTokens, StepToolCall, StepUsage
from anyswe.results.atif import to_atif


def _steps() -> list[Step]:
    first = Step(
        index=0,
        time=1_780_000_000.0,
        protocol="openai-chat",
        model="policy",
        messages=[StepMessage(role="system", text="be brief"), StepMessage(role="user", text="fix calc")],
        reply=StepReply(
            text="",
            reasoning="look first",
            tool_calls=[StepToolCall(id="call_1", name="bash", arguments={"command": "ls"})],
        ),
        tool_results=[
            StepMessage(role="tool", text="calc.py", tool_call_id="call1"),
            StepMessage(role="tool", text="?", tool_call_id="zz"),
        ],
        usage=StepUsage(input_tokens=10, output_tokens=3, cache_read_tokens=90),
        cost_usd=0.002,
        tokens=StepTokens(
            prompt_token_ids=[1, 2], generation_token_ids=[7, 8, 9], generation_log_probs=[-0.1, -0.2, -0.3]
        ),
        request={"tools": [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]},
    )
    # The history sent again (as OpenClaw does): its messages are copied context the second time.
    again = Step(
        index=1,
        time=1_780_000_001.0,
        protocol="openai-chat",
        messages=[StepMessage(role="system", text="be brief"), StepMessage(role="user", text="now test it")],
        reply=StepReply(text="done"),
        rewritten=True,
    )
    refused = Step(index=2, time=1_780_000_002.0, protocol="openai-chat", refused="budget: 2 calls")
    return [first, again, refused]


def test_steps_map_onto_atif_and_validate() -> None:
    doc = to_atif(_steps(), agent="mini-swe-agent", model="policy", session_id="k1", cost_usd=0.002)
    traj = Trajectory.model_validate(doc)
    assert [s.source for s in traj.steps] == ["system", "user", "agent", "system", "user", "agent", "system"]
    assert [bool(s.is_copied_context) for s in traj.steps] == [False, False, False, True, False, False, False]
    agent = traj.steps[2]
    assert agent.reasoning_content == "look first" and agent.tool_calls is not None
    assert agent.observation is not None
    # The result of call_1, echoed as call1 (OpenClaw drops the underscore), is tied to it; one whose
    # id matches no call of this step stands alone.
    assert [r.source_call_id for r in agent.observation.results] == ["call_1", None]
    m = agent.metrics
    assert m is not None and (m.prompt_tokens, m.cached_tokens, m.completion_tokens) == (100, 90, 3)
    assert m.completion_token_ids == [7, 8, 9] and m.logprobs == [-0.1, -0.2, -0.3] and m.prompt_token_ids == [1, 2]
    assert "refused" in str(traj.steps[6].message) and "budget" in str(traj.steps[6].message)
    assert traj.agent.tool_definitions == [
        {"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}
    ]
    assert traj.agent.version  # mini-swe-agent's installed release
    assert (
        traj.final_metrics is not None
        and traj.final_metrics.total_steps == 2
        and traj.final_metrics.total_cost_usd == 0.002
    )


# -- export_atif over a real run directory (an old one: its rows are migrated as read) -----------------

import json  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from anyswe.errors import ResultsError  # noqa: E402
from anyswe.results.atif import export_atif  # noqa: E402

RUN = Path(__file__).resolve().parents[1] / "fixtures" / "run_before_trajectory_contract"


def _run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    return run


def _trajectories(run: Path) -> list[Path]:
    return sorted(run.glob("tasks/*/trajectory.jsonl"))


def test_a_reply_with_a_lone_surrogate_is_exported_as_its_escape_with_every_other_task(tmp_path: Path) -> None:
    run = _run(tmp_path)
    first = _trajectories(run)[0]
    lines = first.read_text().splitlines()
    step = json.loads(lines[-1])
    step["reply"]["text"] = "half a pair: \ud800 here"  # as a model's JSON can hold it (\ud800)
    lines[-1] = json.dumps(step)  # ensure_ascii: the escape
    first.write_text("\n".join(lines) + "\n")
    written = export_atif(run)
    assert len(written) == 3 and all(p.is_file() for p in written)
    text = (run / "atif" / f"{first.parent.name}.json").read_text()
    assert "half a pair: \\ud800 here" in text
    assert json.loads(text)  # the escape reads back as the same string
    assert not list((run / "atif").glob(".*"))  # no temporary file left


def test_a_trajectory_that_cannot_be_read_exports_nothing_at_all(tmp_path: Path) -> None:
    run = _run(tmp_path)
    with _trajectories(run)[1].open("a") as fh:
        fh.write("not a step\n{}\n")
    with pytest.raises(ResultsError, match=r"trajectory\.jsonl:"):
        export_atif(run)
    assert not (run / "atif").exists() or not list((run / "atif").iterdir())


def test_nothing_outside_the_run_is_read_and_no_module_a_run_names_is_imported(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.copy(_trajectories(RUN)[0], outside / "trajectory.jsonl")
    # Out of the run by a row's trajectory_path, and through a link: refused by name, nothing written.
    by_path, by_link = _run(tmp_path / "a"), _run(tmp_path / "b")
    rows = [json.loads(line) for line in (by_path / "results.jsonl").read_text().splitlines()]
    rows[0]["trajectory_path"] = "../../outside/trajectory.jsonl"
    (by_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    linked = by_link / "tasks" / rows[1]["key"] / "trajectory.jsonl"
    linked.unlink()
    linked.symlink_to(outside / "trajectory.jsonl")
    for run, words in ((by_path, "is not a file of the run"), (by_link, "not copied")):
        with pytest.raises(ResultsError, match=words):
            export_atif(run)
        assert not (run / "atif").exists()
    # A run's spec.yaml naming an agent type by a dotted path: never imported for its version.
    run = _run(tmp_path / "c")
    (tmp_path / "planted_agent.py").write_text("import pathlib\npathlib.Path(__file__).with_suffix('.ran').touch()\n")
    (run / "spec.yaml").write_text(
        (run / "spec.yaml").read_text().replace("type: mini-swe-agent", "type: planted_agent:Agent")
    )
    sys.path.insert(0, str(tmp_path))
    try:
        written = export_atif(run)
    finally:
        sys.path.remove(str(tmp_path))
    assert len(written) == 3
    assert not (tmp_path / "planted_agent.ran").exists() and "planted_agent" not in sys.modules
