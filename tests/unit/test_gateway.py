"""The gateway and the scripted model over real HTTP, read by the official Anthropic and OpenAI SDKs.

If the SDKs parse what the gateway sends — JSON and every streamed event — agents built on them
will too. The scripted model decides from the conversation, so a repeated (probe) request gets
the same answer and the next step comes only once the last one's result is in the history.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from anyswe.gateway import Budget, Gateway, ScriptedModel
from anyswe.gateway.scripted import shell_tool

pytestmark = pytest.mark.anyio

STEPS = ["ls /testbed", "sed -i 's/a/b/' /testbed/x.py"]
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
BASH_ANTHROPIC = {
    "name": "bash",
    "description": "run",
    "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
}
BASH_CHAT = {"type": "function", "function": {"name": "bash", "parameters": BASH_ANTHROPIC["input_schema"]}}
BASH_RESPONSES = {"type": "function", "name": "bash", "parameters": BASH_ANTHROPIC["input_schema"]}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


_OPEN: list[Any] = []


def _client(kind: Any, **kw: Any) -> Any:
    """An SDK client closed when the test's gateway is (in the test's own event loop)."""
    client = kind(max_retries=0, **kw)
    _OPEN.append(client)
    return client


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Gateway]:
    async with Gateway(socket_dir=tmp_path / "sock") as gw:
        await gw.start()
        yield gw
        while _OPEN:
            await _OPEN.pop().close()


def grant(gw: Gateway, tmp_path: Path, **kw: Any) -> str:
    return gw.grant(
        "task-1", "scripted-m", ScriptedModel(STEPS, submit=SUBMIT), trajectory=tmp_path / "traj.jsonl", **kw
    )


async def test_anthropic_messages_json_and_stream(gateway: Gateway, tmp_path: Path) -> None:
    token = grant(gateway, tmp_path)
    client = _client(anthropic.AsyncAnthropic, base_url=gateway.url(), api_key=token)
    ask = {
        "model": "m",
        "max_tokens": 100,
        "tools": [BASH_ANTHROPIC],
        "messages": [{"role": "user", "content": "fix it"}],
    }
    first = await client.messages.create(**ask)  # type: ignore[call-overload]
    assert first.stop_reason == "tool_use" and first.content[0].type == "tool_use"
    assert first.content[0].input == {"command": STEPS[0]} and first.usage.input_tokens > 0
    again = await client.messages.create(**ask)  # type: ignore[call-overload]
    assert again.content[0].input == {"command": STEPS[0]}  # a probe does not advance the script
    call = first.content[0]
    history = [
        *ask["messages"],
        {"role": "assistant", "content": [{"type": "tool_use", "id": call.id, "name": "bash", "input": call.input}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "x.py"}]},
    ]
    async with client.messages.stream(**{**ask, "messages": history}) as stream:  # type: ignore[arg-type]
        streamed = await stream.get_final_message()
    assert streamed.content[0].type == "tool_use" and streamed.content[0].input == {"command": STEPS[1]}
    assert streamed.usage.output_tokens > 0 and streamed.stop_reason == "tool_use"


async def test_openai_chat_json_and_stream(gateway: Gateway, tmp_path: Path) -> None:
    token = grant(gateway, tmp_path)
    client = _client(openai.AsyncOpenAI, base_url=gateway.url() + "/v1", api_key=token)
    messages: list[Any] = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "fix it"}]
    first = await client.chat.completions.create(model="m", messages=messages, tools=[BASH_CHAT])  # type: ignore[list-item]
    calls = first.choices[0].message.tool_calls or []
    assert first.choices[0].finish_reason == "tool_calls" and json.loads(calls[0].function.arguments) == {
        "command": STEPS[0]
    }  # type: ignore[union-attr]
    history = [
        *messages,
        {"role": "assistant", "content": None, "tool_calls": [c.model_dump() for c in calls]},
        {"role": "tool", "tool_call_id": calls[0].id, "content": "x.py"},
        {"role": "assistant", "content": None, "tool_calls": [{**calls[0].model_dump(), "id": "c2"}]},
        {"role": "tool", "tool_call_id": "c2", "content": ""},
    ]
    stream = await client.chat.completions.create(
        model="m",
        messages=history,
        tools=[BASH_CHAT],
        stream=True,
        stream_options={"include_usage": True},  # type: ignore[list-item]
    )
    args, usage, finish = "", None, None
    async for chunk in stream:
        for choice in chunk.choices:
            for tc in choice.delta.tool_calls or []:
                args += tc.function.arguments or ""  # type: ignore[union-attr]
            finish = choice.finish_reason or finish
        usage = chunk.usage or usage
    assert json.loads(args) == {"command": SUBMIT} and finish == "tool_calls"
    assert usage is not None and usage.total_tokens == usage.prompt_tokens + usage.completion_tokens > 0


async def test_openai_responses_json_and_stream(gateway: Gateway, tmp_path: Path) -> None:
    token = grant(gateway, tmp_path)
    client = _client(openai.AsyncOpenAI, base_url=gateway.url() + "/v1", api_key=token)
    first = await client.responses.create(model="m", input="fix it", tools=[BASH_RESPONSES])  # type: ignore[list-item]
    (item,) = first.output
    assert item.type == "function_call" and json.loads(item.arguments) == {"command": STEPS[0]}
    assert first.usage is not None and first.usage.input_tokens > 0
    history: list[Any] = [
        {"role": "user", "content": "fix it"},
        {"type": "function_call", "call_id": item.call_id, "name": "bash", "arguments": item.arguments},
        {"type": "function_call_output", "call_id": item.call_id, "output": "x.py"},
    ]
    stream = await client.responses.create(model="m", input=history, tools=[BASH_RESPONSES], stream=True)  # type: ignore[list-item]
    kinds, final = [], None
    async for event in stream:
        kinds.append(event.type)
        if event.type == "response.completed":
            final = event.response
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert "response.function_call_arguments.delta" in kinds
    assert final is not None and json.loads(final.output[0].arguments) == {"command": STEPS[1]}  # type: ignore[union-attr]


async def test_text_reply_without_tools_and_final_answer(gateway: Gateway, tmp_path: Path) -> None:
    token = gateway.grant("t", "m", ScriptedModel(["true"]))
    client = _client(openai.AsyncOpenAI, base_url=gateway.url() + "/v1", api_key=token)
    first = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "go"}])
    assert "```bash\ntrue\n```" in (first.choices[0].message.content or "")
    done = await client.chat.completions.create(
        model="m",
        messages=[
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": first.choices[0].message.content},
            {"role": "user", "content": "ok"},
        ],
    )
    assert done.choices[0].finish_reason == "stop" and "done" in (done.choices[0].message.content or "")


async def test_tokens_refused_routes_models_and_trajectory(gateway: Gateway, tmp_path: Path) -> None:
    token = grant(gateway, tmp_path)
    bad = _client(anthropic.AsyncAnthropic, base_url=gateway.url(), api_key="anyswe-wrong")
    with pytest.raises(anthropic.AuthenticationError):
        await bad.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    good = _client(openai.AsyncOpenAI, base_url=gateway.url() + "/v1", api_key=token)
    assert [m.id for m in (await good.models.list()).data] == ["scripted-m"]
    # The token may also be a path prefix (for agents that only let you set a base URL).
    prefixed = _client(openai.AsyncOpenAI, base_url=f"{gateway.url()}/t/{token}/v1", api_key="unused")
    await prefixed.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.NotFoundError) as info:
        await good.embeddings.create(model="m", input="x")
    assert "no route POST /v1/embeddings" in str(info.value)
    usage = gateway.revoke(token)
    assert usage.calls == 1 and usage.usage.input_tokens > 0  # model listings are not model calls
    with pytest.raises(openai.AuthenticationError):
        await good.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    lines = [json.loads(x) for x in (tmp_path / "traj.jsonl").read_text().splitlines()]
    assert len(lines) == 1 and lines[0]["protocol"] == "openai-chat" and lines[0]["model"] == "scripted-m"
    assert token not in (tmp_path / "traj.jsonl").read_text()


async def test_budget_refuses_in_the_protocols_error_shape(gateway: Gateway, tmp_path: Path) -> None:
    token = grant(gateway, tmp_path, budget=Budget(calls=1))
    client = _client(anthropic.AsyncAnthropic, base_url=gateway.url(), api_key=token)
    ask: dict[str, Any] = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    await client.messages.create(**ask)
    with pytest.raises(anthropic.AuthenticationError, match="budget exhausted: calls"):
        await client.messages.create(**ask)
    assert gateway.revoke(token).exhausted == "calls (1)"


async def test_a_call_that_cannot_be_recorded_still_answers_and_marks_the_task(
    gateway: Gateway, tmp_path: Path
) -> None:
    """A full disk under the trajectory is the host's failure: the agent is served, the task is infra."""
    (tmp_path / "not-a-dir").write_text("")
    token = gateway.grant(
        "task-1", "m", ScriptedModel(STEPS, submit=SUBMIT), trajectory=tmp_path / "not-a-dir" / "traj.jsonl"
    )
    client = _client(anthropic.AsyncAnthropic, base_url=gateway.url(), api_key=token)
    reply = await client.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    assert reply.content
    used = gateway.revoke(token)
    assert used.calls == 1 and used.unrecorded is not None and "could not record" in used.unrecorded


def test_shell_tool_is_found_by_name_and_argument() -> None:
    claude_bash = {"Bash": {"properties": {"command": {}, "timeout": {}}, "required": ["command"]}}
    assert shell_tool(claude_bash) == ("Bash", "command")
    assert shell_tool({"run_shell_command": {"properties": {"cmd": {}}}}) == ("run_shell_command", "cmd")
    assert shell_tool({"read_file": {"properties": {"path": {}}}}) is None


def test_oracle_applies_the_patch_then_submits(tmp_path: Path) -> None:
    import subprocess

    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "f.txt").write_text("old\n")
    patch = "--- a/f.txt\n+++ b/f.txt\n@@ -1 +1 @@\n-old\n+new ANYSWE_ORACLE_EOF\n"
    model = ScriptedModel.oracle(patch, str(repo), submit=SUBMIT)
    from anyswe.gateway.wire import Conversation, Message

    tools = {"bash": {"properties": {"command": {}}}}
    step = model.reply(Conversation("m", [Message("user", "fix")], tools))
    subprocess.run(["bash", "-c", step.tool_calls[0].arguments["command"]], check=True)
    assert (repo / "f.txt").read_text() == "new ANYSWE_ORACLE_EOF\n"  # a delimiter inside the patch is safe
    after = Conversation("m", [Message("user", "fix"), Message("assistant", tool_calls=step.tool_calls)], tools)
    assert model.reply(after).tool_calls[0].arguments == {"command": SUBMIT}


@pytest.mark.parametrize("upstream_api", ["openai-chat", "anthropic-messages", "openai-responses"])
@pytest.mark.parametrize("agent_api", ["openai-chat", "anthropic-messages", "openai-responses"])
async def test_any_agent_protocol_on_any_upstream_protocol(
    gateway: Gateway, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, agent_api: str, upstream_api: str
) -> None:
    """The agent speaks one protocol to the gateway, the model another: translated, tools and streaming included.

    The upstream is a second gateway serving the scripted model (it speaks every protocol), so the
    real key — the upstream's token — is checked by a real HTTP server and must reach only it.
    """
    from anyswe.gateway.upstream import HttpUpstream
    from anyswe.model import ModelSpec

    key = "sk-anyswe-sentinel-" + "x" * 16
    async with Gateway() as provider:
        await provider.start()
        provider.grant("upstream", "m", ScriptedModel(STEPS), token=key, trajectory=tmp_path / "upstream.jsonl")
        monkeypatch.setenv("ANYSWE_TEST_UPSTREAM_KEY", key)
        base = provider.url() if upstream_api == "anthropic-messages" else provider.url() + "/v1"
        spec = ModelSpec(
            api=upstream_api,
            model="m",
            base_url=base,
            api_key_env="ANYSWE_TEST_UPSTREAM_KEY",
            params={"temperature": 1.0},
        )  # type: ignore[arg-type]
        token = gateway.grant("task-1", "m", HttpUpstream(spec), trajectory=tmp_path / "traj.jsonl")
        command = await _ask(gateway, token, agent_api)
        assert command == STEPS[0]
        upstream_calls = [json.loads(x) for x in (tmp_path / "upstream.jsonl").read_text().splitlines()]
        assert [c["protocol"] for c in upstream_calls] == [upstream_api]
        assert upstream_calls[0]["request"].get("temperature") == 1.0  # the spec's params were applied
        assert gateway.revoke(token).usage.input_tokens > 0
    assert key not in (tmp_path / "traj.jsonl").read_text() and key != token


async def _ask(gateway: Gateway, token: str, agent_api: str) -> str:
    """One streamed request in ``agent_api`` through the gateway; the shell command the model called."""
    if agent_api == "anthropic-messages":
        client = _client(anthropic.AsyncAnthropic, base_url=gateway.url(), api_key=token)
        ask = {
            "model": "m",
            "max_tokens": 100,
            "tools": [BASH_ANTHROPIC],
            "messages": [{"role": "user", "content": "go"}],
        }
        async with client.messages.stream(**ask) as stream:  # type: ignore[arg-type]
            message = await stream.get_final_message()
        return str(message.content[-1].input["command"])  # type: ignore[union-attr]
    client = _client(openai.AsyncOpenAI, base_url=gateway.url() + "/v1", api_key=token)
    if agent_api == "openai-chat":
        stream = await client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "go"}],
            tools=[BASH_CHAT],
            stream=True,  # type: ignore[list-item]
        )
        args = ""
        async for chunk in stream:
            for choice in chunk.choices:
                args += "".join(tc.function.arguments or "" for tc in choice.delta.tool_calls or [])  # type: ignore[union-attr]
        return str(json.loads(args)["command"])
    events = await client.responses.create(model="m", input="go", tools=[BASH_RESPONSES], stream=True)  # type: ignore[list-item]
    async for event in events:
        if event.type == "response.completed":
            return str(json.loads(event.response.output[0].arguments)["command"])  # type: ignore[union-attr]
    raise AssertionError("no response.completed event")


async def test_wall_time_budget(gateway: Gateway, tmp_path: Path) -> None:
    import asyncio

    token = grant(gateway, tmp_path, budget=Budget(seconds=0.2))
    client = _client(openai.AsyncOpenAI, base_url=gateway.url() + "/v1", api_key=token)
    await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    await asyncio.sleep(0.3)  # past the budget, counted from the first call
    with pytest.raises(openai.AuthenticationError, match="budget exhausted: seconds"):
        await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])


class Reasoner:
    """An upstream whose model reasons, then calls a tool."""

    def reply(self, conv: Any) -> Any:
        from anyswe.gateway.wire import Reply, ToolCall

        return Reply(
            reasoning="the test wants 4", tool_calls=[ToolCall("c1", "bash", {"command": "ls"})], stop="tool_use"
        )


async def test_a_models_reasoning_reaches_openai_agents_in_their_shapes(gateway: Gateway, tmp_path: Path) -> None:
    """Chat completions: ``reasoning_content`` on the message and in stream deltas (vLLM's and DeepSeek's
    field); Responses: a reasoning item with its summary, streamed too. (Anthropic's thinking blocks
    carry a signature only Anthropic can make: the reasoning is kept in the trajectory, not sent.)"""
    token = gateway.grant("t", "m", Reasoner(), trajectory=tmp_path / "traj.jsonl")
    client = _client(openai.AsyncOpenAI, base_url=gateway.url() + "/v1", api_key=token)
    messages: list[Any] = [{"role": "user", "content": "fix it"}]
    chat = await client.chat.completions.create(model="m", messages=messages, tools=[BASH_CHAT])  # type: ignore[list-item]
    assert getattr(chat.choices[0].message, "reasoning_content", None) == "the test wants 4"
    stream = await client.chat.completions.create(model="m", messages=messages, tools=[BASH_CHAT], stream=True)  # type: ignore[list-item]
    said = "".join([getattr(c.choices[0].delta, "reasoning_content", None) or "" async for c in stream if c.choices])
    assert said == "the test wants 4"
    response = await client.responses.create(model="m", input="fix it", tools=[BASH_RESPONSES])  # type: ignore[list-item]
    assert [i.type for i in response.output] == ["reasoning", "function_call"]
    assert response.output[0].summary[0].text == "the test wants 4"  # type: ignore[union-attr]
    events = await client.responses.create(model="m", input="fix it", tools=[BASH_RESPONSES], stream=True)  # type: ignore[list-item]
    final = [e.response async for e in events if e.type == "response.completed"]
    assert [i.type for i in final[0].output] == ["reasoning", "function_call"]
    steps = [json.loads(line) for line in (tmp_path / "traj.jsonl").read_text().splitlines()]
    assert {s["reply"]["reasoning"] for s in steps} == {"the test wants 4"}
