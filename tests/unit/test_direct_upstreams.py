"""The OpenAI upstreams the gateway reaches without litellm (gateway/openai_chat.py and
openai_responses.py), against a real HTTP server: an agent's own request goes on as written when it
speaks the upstream's protocol, another's is translated with its tools' descriptions; reasoning and a
training server's token fields come back; a call that times out is not tried again."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiohttp import web
from upstreamkit import upstream

from anyswe.gateway import openai_chat, openai_responses
from anyswe.gateway.errors import UpstreamError
from anyswe.gateway.upstream import HttpUpstream
from anyswe.gateway.wire import read_request
from anyswe.model import ModelSpec

CHAT_REPLY = {
    "choices": [
        {
            "index": 0,
            "finish_reason": "stop",
            "message": {"role": "assistant", "content": "done", "reasoning_content": "the test wants 4"},
        }
    ],
    "usage": {"prompt_tokens": 12, "completion_tokens": 3},
}
#: As NeMo Gym's model server answers a training run: the policy's tokens on the call's last item.
RESPONSES_REPLY = {
    "id": "resp_1",
    "object": "response",
    "output": [
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "look first"}]},
        {"type": "message", "id": "m1", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_1",
            "name": "bash",
            "arguments": '{"command": "ls"}',
            "prompt_token_ids": [1, 2, 3],
            "generation_token_ids": [9, 8],
            "generation_log_probs": [-0.5, -0.1],
        },
    ],
    "usage": {"input_tokens": 30, "output_tokens": 5, "input_tokens_details": {"cached_tokens": 10}},
}
BASH = {"type": "object", "properties": {"command": {"type": "string"}}}


@asynccontextmanager
async def server(seen: list[dict[str, Any]], delay: float = 0.0) -> AsyncIterator[str]:
    async def answer(request: web.Request) -> web.Response:
        seen.append({"path": request.path, "body": await request.json()})
        await asyncio.sleep(delay)
        return web.json_response(RESPONSES_REPLY if request.path.endswith("/responses") else CHAT_REPLY)

    async with upstream(answer, ("/v1/chat/completions", "/v1/responses")) as url:
        yield url


def ask(api: str, agent_protocol: str, agent_body: dict[str, Any], **spec: Any) -> tuple[Any, list[dict[str, Any]]]:
    seen: list[dict[str, Any]] = []

    async def go() -> Any:
        async with server(seen, spec.pop("delay", 0.0)) as url:
            model = ModelSpec(api=api, base_url=url, model="policy", **spec)  # type: ignore[arg-type]
            return await HttpUpstream(model).reply(read_request(agent_protocol, agent_body))  # type: ignore[arg-type]

    return asyncio.run(go()), seen


CHAT_AGENT = {
    "model": "m",
    "temperature": 0.9,  # the agent's own: the spec's params are what is sent
    "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "go"}]},
        {"role": "assistant", "content": None, "reasoning_content": "hm", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
        ]},
        {"role": "tool", "tool_call_id": "c1", "name": "bash", "content": "a.py"},
    ],
    "tools": [{"type": "function", "function": {"name": "bash", "description": "Run.", "parameters": BASH}}],
}  # fmt: skip
ANTHROPIC_AGENT = {
    "model": "m",
    "max_tokens": 100,
    "system": "be brief",
    "messages": [{"role": "user", "content": "go"}],
    "tools": [{"name": "bash", "description": "Run a shell command.", "input_schema": BASH}],
}


def test_a_chat_agent_reaches_a_chat_upstream_as_it_wrote_its_request() -> None:
    reply, seen = ask("openai-chat", "openai-chat", CHAT_AGENT, params={"temperature": 0.2})
    body = seen[0]["body"]
    # Content parts, the assistant's reasoning and the tool message's name survive; the neutral form drops them.
    assert body["messages"] == CHAT_AGENT["messages"] and body["tools"] == CHAT_AGENT["tools"]
    assert (body["model"], body["temperature"]) == ("policy", 0.2)
    assert (reply.text, reply.reasoning) == ("done", "the test wants 4")


def test_another_protocols_agent_is_translated_with_its_tools_descriptions() -> None:
    _, seen = ask("openai-chat", "anthropic-messages", ANTHROPIC_AGENT)
    (tool,) = seen[0]["body"]["tools"]
    assert tool["function"] == {"name": "bash", "parameters": BASH, "description": "Run a shell command."}
    assert seen[0]["body"]["messages"] == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "go"}]


def test_a_responses_upstream_gives_reasoning_calls_usage_and_the_policys_tokens() -> None:
    reply, seen = ask("openai-responses", "anthropic-messages", ANTHROPIC_AGENT, params={"max_tokens": 64})
    (call,) = seen
    assert call["path"] == "/v1/responses"
    body = call["body"]
    assert body["input"] == [
        {"type": "message", "role": "system", "content": "be brief"},
        {"type": "message", "role": "user", "content": "go"},
    ]
    assert body["tools"] == [
        {"type": "function", "name": "bash", "parameters": BASH, "description": "Run a shell command."}
    ]
    assert (body["max_output_tokens"], body["store"]) == (64, False) and "max_tokens" not in body
    assert (reply.text, reply.reasoning, reply.stop) == ("ok", "look first", "tool_use")
    assert [(c.id, c.name, c.arguments) for c in reply.tool_calls] == [("call_1", "bash", {"command": "ls"})]
    assert (reply.usage.input_tokens, reply.usage.output_tokens, reply.usage.cache_read_tokens) == (30, 5, 10)
    assert reply.tokens == {
        "prompt_token_ids": [1, 2, 3],
        "generation_token_ids": [9, 8],
        "generation_log_probs": [-0.5, -0.1],
    }


def test_a_responses_agent_reaches_a_responses_upstream_as_it_wrote_its_request() -> None:
    agent = {
        "model": "m",
        "instructions": "be brief",
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
            {"type": "reasoning", "id": "rs_0", "summary": []},
            {"type": "function_call", "call_id": "c1", "name": "bash", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "a.py"},
        ],
        "tools": [{"type": "function", "name": "bash", "description": "Run.", "parameters": BASH}],
    }
    _, seen = ask("openai-responses", "openai-responses", agent)
    body = seen[0]["body"]
    assert (body["input"], body["instructions"], body["tools"]) == (agent["input"], "be brief", agent["tools"])


def test_an_incomplete_reply_is_a_max_tokens_stop() -> None:
    cut = {"output": [], "incomplete_details": {"reason": "max_output_tokens"}, "usage": {}}
    assert openai_responses.read_reply(cut).stop == "max_tokens"
    with pytest.raises(UpstreamError, match="no output"):
        openai_responses.read_reply({"error": "x"})


def test_a_call_past_the_timeout_is_a_504_and_not_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(openai_chat, "TIMEOUT", 0.3)
    seen: list[dict[str, Any]] = []

    async def go() -> None:
        async with server(seen, 2.0) as url:
            spec = ModelSpec(api="openai-chat", base_url=url, model="p")
            await HttpUpstream(spec).reply(read_request("openai-chat", CHAT_AGENT))

    with pytest.raises(UpstreamError) as caught:
        asyncio.run(go())
    assert caught.value.status == 504 and "no answer" in str(caught.value) and len(seen) == 1


def test_what_the_fast_encoder_refuses_is_sent_exactly_all_the_same() -> None:
    """An integer past 64 bits in a tool's schema (orjson refuses it; the standard library's JSON is used)."""
    huge = {"type": "object", "properties": {"n": {"type": "integer", "maximum": 2**70}}}
    agent = {**CHAT_AGENT, "tools": [{"type": "function", "function": {"name": "bash", "parameters": huge}}]}
    _, seen = ask("openai-chat", "openai-chat", agent)
    assert seen[0]["body"]["tools"][0]["function"]["parameters"]["properties"]["n"]["maximum"] == 2**70
