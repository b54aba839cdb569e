"""An ATIF trajectory another tool wrote, served again through anyswe's replay model: Harbor's trial
layout (``<instance_id>__<trial>/agent/trajectory.json``), written here with the ``atif`` package's
models (the ones Harbor writes with), read in order; a model block names it as ``replay: {atif: DIR}``.
(A whole run replayed from anyswe's own ATIF export: tests/e2e/test_cli_agents.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from atif import Agent, Metrics, Observation, ObservationResult, Step, ToolCall, Trajectory
from pydantic import ValidationError

from anyswe.errors import AgentError
from anyswe.execute.unit import replay_source
from anyswe.gateway.errors import UpstreamRefused
from anyswe.gateway.replay import AtifReplayModel
from anyswe.gateway.wire import Conversation, Message
from anyswe.model import ModelSpec, ReplaySpec


def _harbor_trajectory() -> Trajectory:
    call = ToolCall(tool_call_id="call_a1", function_name="bash", arguments={"command": "sed -i s/-/+/ calc.py"})
    return Trajectory(
        schema_version="ATIF-v1.8",
        session_id="demo__calc-1__Xq3v",
        agent=Agent(name="terminus-2", version="0.26.0", model_name="openai/gpt-5.5"),
        steps=[
            Step(step_id=1, source="system", message="You are a coding agent."),
            Step(step_id=2, source="user", message="calc.add subtracts; fix it."),
            Step(
                step_id=3,
                source="agent",
                model_name="openai/gpt-5.5",
                message="I will fix the operator.",
                reasoning_content="add returns a - b",
                tool_calls=[call],
                observation=Observation(results=[ObservationResult(source_call_id="call_a1", content="")]),
                metrics=Metrics(prompt_tokens=1200, completion_tokens=40, cached_tokens=1000),
            ),
            # History the agent sent again after a context summary: copied, no call of its own.
            Step(step_id=4, source="agent", message="I will fix the operator.", is_copied_context=True),
            Step(
                step_id=5,
                source="agent",
                message=[{"type": "text", "text": "Done: add returns a + b."}],
                metrics=Metrics(prompt_tokens=1300, completion_tokens=12),
            ),
        ],
    )


def _conv() -> Conversation:
    return Conversation("m", [Message("user", "a prompt of anyswe's own harness")])


def test_harbors_trajectory_is_served_in_order(tmp_path: Path) -> None:
    trial = tmp_path / "demo__calc-1__Xq3v" / "agent"
    trial.mkdir(parents=True)
    (trial / "trajectory.json").write_text(_harbor_trajectory().model_dump_json(exclude_none=True))
    source = replay_source(ModelSpec(api="scripted", replay=ReplaySpec(atif=tmp_path)), None, "demo__calc-1", 0)  # type: ignore[arg-type]
    assert source is not None and source.atif and source.trajectory == trial / "trajectory.json"
    model = AtifReplayModel.load(source.trajectory)
    first = model.reply(_conv())  # any conversation: another harness's prompts are its own
    assert first.reasoning == "add returns a - b" and first.text == "I will fix the operator."
    assert [(c.id, c.name, c.arguments) for c in first.tool_calls] == [
        ("call_a1", "bash", {"command": "sed -i s/-/+/ calc.py"})
    ]
    assert (first.usage.input_tokens, first.usage.cache_read_tokens, first.usage.output_tokens) == (200, 1000, 40)
    assert first.stop == "tool_use"
    second = model.reply(_conv())  # the copied step is skipped: it was no call
    assert second.text == "Done: add returns a + b." and not second.tool_calls and second.stop == "end"
    with pytest.raises(UpstreamRefused, match="call 3 was never made"):
        model.reply(_conv())
    # Sample 1 has no second trial; an instance with none is that task's error, not the run's.
    for iid, sample in (("demo__calc-1", 1), ("demo__other-2", 0)):
        missing = replay_source(ModelSpec(api="scripted", replay=ReplaySpec(atif=tmp_path)), None, iid, sample)  # type: ignore[arg-type]
        assert missing is not None and missing.trajectory is None and "no ATIF trajectory" in str(missing.error)


def test_a_file_that_is_no_atif_is_the_tasks_error(tmp_path: Path) -> None:
    (tmp_path / "demo__calc-1.json").write_text('{"steps": ["ls"]}')
    with pytest.raises(AgentError, match="is no ATIF trajectory"):
        AtifReplayModel.load(tmp_path / "demo__calc-1.json")


def test_a_replay_block_names_one_source() -> None:
    with pytest.raises(ValidationError, match="exactly one of run"):
        ReplaySpec()
    with pytest.raises(ValidationError, match="exactly one of run"):
        ReplaySpec(run=Path("a"), atif=Path("b"))
    spec = ModelSpec(api="scripted", replay=ReplaySpec(atif=Path("harbor-job"))).relative_to(Path("/specs"))
    assert spec.replay is not None and spec.replay.atif == Path("/specs/harbor-job")
    assert spec.key_payload()["replay"]["atif"] == "harbor-job"
