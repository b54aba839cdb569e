"""The parts of ``anyswe serve``'s Gym contract that need no sandbox: the policy model's routing
(nemo-gym's apply_rollout_prefix: the model server's root, ``/ng-rollout/<id>``, then ``/v1``) and
the trajectory as Responses output items, token ids on each call's last item."""

from __future__ import annotations

import pytest

from anyswe.errors import SpecError
from anyswe.gateway.trajectory import Step, StepMessage, StepReply, StepTokens, StepToolCall
from anyswe.gym import output_items
from anyswe.serve import ServeConfig, Server


def test_the_policy_model_is_routed_as_gym_routes_it() -> None:
    server = Server(ServeConfig(model={"api": "openai-chat", "base_url": "http://10.0.0.5:8000/"}))
    params = {
        "model": "Qwen/Qwen3-Coder-30B-A3B-Instruct",
        "temperature": 0.7,
        "top_p": 0.8,
        "max_output_tokens": 12288,
    }
    body = {"responses_create_params": {**params, "metadata": {"instance_id": "demo__calc-1"}}, "_ng_rollout_id": "r-7"}
    instance, blocks = server.blocks(body)
    assert instance == "demo__calc-1"
    assert blocks["model"] == {
        "api": "openai-chat",
        "base_url": "http://10.0.0.5:8000/ng-rollout/r-7/v1",
        "model": "Qwen/Qwen3-Coder-30B-A3B-Instruct",
        "params": {"temperature": 0.7, "top_p": 0.8, "max_tokens": 12288},
    }
    # Without a rollout id, the root as it is.
    del body["_ng_rollout_id"]
    assert server.blocks(body)[1]["model"]["base_url"] == "http://10.0.0.5:8000/v1"


def test_a_row_in_the_metadata_is_the_instance() -> None:
    server = Server(ServeConfig())
    row = {"instance_id": "x__y-1", "repo": "x/y", "base_commit": "abc"}
    body = {
        "responses_create_params": {"metadata": {"instance_id": "x__y-1", "instance_dict": row, "dataset_name": "d"}}
    }
    instance, blocks = server.blocks(body)
    assert instance == row and blocks["dataset"] == "d"


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({}, "responses_create_params"),
        ({"responses_create_params": {"metadata": {}}}, "metadata.instance_id"),
        ({"responses_create_params": {"metadata": {"instance_id": "a"}}, "anyswe": [1]}, "`anyswe`"),
    ],
)
def test_malformed_requests_name_what_is_wrong(body: dict[str, object], words: str) -> None:
    with pytest.raises(SpecError, match=words):
        Server(ServeConfig()).blocks(body)


def test_output_items_in_order_with_token_ids_on_each_calls_last_item() -> None:
    call = StepToolCall(id="call_1", name="bash", arguments={"command": "ls"})
    steps = [
        Step(
            index=0,
            reply=StepReply(text="Let me look.", reasoning="think", tool_calls=[call]),
            tool_results=[StepMessage(role="tool", text="README.md", tool_call_id="call_1")],
            tokens=StepTokens(prompt_token_ids=[1, 2], generation_token_ids=[3, 4], generation_log_probs=[-0.1, -0.2]),
        ),
        Step(index=1, reply=StepReply(text="Done.")),
    ]
    items, tools = output_items(steps)
    assert [i["type"] for i in items] == ["reasoning", "message", "function_call", "function_call_output", "message"]
    assert items[2]["prompt_token_ids"] == [1, 2] and items[2]["generation_log_probs"] == [-0.1, -0.2]
    assert not any("prompt_token_ids" in i for i in items[:2] + items[3:])
    assert items[3]["call_id"] == items[2]["call_id"] == "call_1"
    assert tools == [{"type": "function", "name": "bash", "parameters": {}, "strict": False}]


@pytest.mark.parametrize(
    ("facts", "kind"),
    [
        ({"error_kind": "infra", "error": "SandboxStartError: docker could not start"}, "provider_unavailable"),
        ({"error_kind": "infra", "error": "SandboxLost: ... (OOMKilled, exit 137)"}, "provider_oom_killed"),
        ({"error_kind": "infra", "error": "SandboxLost: sandbox x died during the agent's work"}, "session_lost"),
        ({"error_kind": "infra", "error": "the model's upstream failed (3 calls)"}, "transport_unreachable"),
        ({"error_kind": "grading", "error": "GradingError: no report"}, "verifier_error"),
        ({"error_kind": "internal", "error": "Traceback ..."}, "anyswe:internal"),
        ({"agent_timed_out": True}, "agent_timeout"),
        ({"error_kind": "agent", "error": "PatchCaptureFailed: not a git repository"}, "agent_run_error"),
        ({"tests_timed_out": True}, "anyswe:eval_timeout"),
        ({}, None),
    ],
)  # fmt: skip
def test_failures_are_named_in_gyms_shared_vocabulary(facts: dict[str, object], kind: str | None) -> None:
    from types import SimpleNamespace

    from anyswe.gym import failure_kind

    rollout = SimpleNamespace(
        error_kind=facts.get("error_kind"),
        error=facts.get("error"),
        agent_timed_out=facts.get("agent_timed_out", False),
        result=SimpleNamespace(tests_timed_out=facts.get("tests_timed_out", False)),
    )
    assert failure_kind(rollout) == kind  # type: ignore[arg-type]


def test_a_model_free_agent_asked_for_gets_no_model() -> None:
    server = Server(ServeConfig(model={"api": "scripted", "protocol": "openai-chat"}))
    body = {
        "responses_create_params": {"metadata": {"instance_id": "demo__calc-1"}},
        "anyswe": {"agent": {"type": "gold"}},
    }
    assert server.blocks(body)[1]["model"] is None
    del body["anyswe"]
    assert server.blocks(body)[1]["model"] == {"api": "scripted", "protocol": "openai-chat"}


def test_the_server_gives_its_stop_signals_back_to_the_loop_it_ran_in() -> None:
    """A notebook's or a test's loop outlives the server: while it served, SIGTERM and SIGINT stopped
    it; afterwards they are what they were before (asyncio gives handlers back only when the loop is
    closed, and a kept one swallowed every later Ctrl-C)."""
    import asyncio
    import os
    import signal

    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    async def main() -> None:
        ready = asyncio.Event()
        served = asyncio.ensure_future(Server(ServeConfig()).serve("127.0.0.1", 0, ready))
        await asyncio.wait_for(ready.wait(), 30)
        assert signal.getsignal(signal.SIGTERM) != before[signal.SIGTERM]  # the server's, while it serves
        os.kill(os.getpid(), signal.SIGTERM)  # stops it, as a scheduler would
        await asyncio.wait_for(served, 30)

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(main())
        assert {s: signal.getsignal(s) for s in before} == before  # the loop still open
    finally:
        loop.close()
