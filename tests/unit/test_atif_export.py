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
