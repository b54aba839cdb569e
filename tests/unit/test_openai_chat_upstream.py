"""The direct OpenAI chat upstream (gateway/openai_chat.py) against a real HTTP server that fails as
upstreams fail: a transient 500 or 429 is tried again, a 400 is not, a too-long prompt is the
context-window error agents recognise, a dead port is a 502 (the gateway's "unavailable"), the key
goes only in the Authorization header, vLLM's token fields are read."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiohttp import web
from upstreamkit import upstream

from anyswe.gateway import openai_chat
from anyswe.gateway.errors import UpstreamError
from anyswe.gateway.upstream import HttpUpstream
from anyswe.gateway.wire import Conversation, Message
from anyswe.model import ModelSpec

OK = {
    "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "done"}}],
    "usage": {"prompt_tokens": 12, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 4}},
}


@asynccontextmanager
async def server(answers: list[tuple[int, Any]], seen: list[dict[str, Any]]) -> AsyncIterator[str]:
    async def chat(request: web.Request) -> web.Response:
        seen.append({"body": await request.json(), "auth": request.headers.get("Authorization")})
        status, body = answers.pop(0) if answers else (200, OK)
        return web.json_response(body, status=status)

    async with upstream(chat) as url:
        yield url


def conv() -> Conversation:
    return Conversation(model="m", messages=[Message(role="user", text="go")])


def run(coro: Callable[[], Any]) -> Any:
    return asyncio.run(coro())


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(openai_chat, "BACKOFF", 0.01)


def test_a_reply_with_usage_params_and_the_key_only_in_the_header(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANYSWE_TEST_KEY", "sk-sentinel-123")
    seen: list[dict[str, Any]] = []

    async def go() -> Any:
        async with server([], seen) as url:
            spec = ModelSpec(
                api="openai-chat", base_url=url, model="m", api_key_env="ANYSWE_TEST_KEY", params={"temperature": 0.5}
            )
            return await HttpUpstream(spec).reply(conv())

    reply = run(go)
    assert (reply.text, reply.usage.input_tokens, reply.usage.output_tokens, reply.usage.cache_read_tokens) == (
        "done",
        12,
        3,
        4,
    )
    assert reply.tokens is None
    (call,) = seen
    assert call["auth"] == "Bearer sk-sentinel-123" and "sk-sentinel" not in json.dumps(call["body"])
    assert call["body"]["temperature"] == 0.5 and call["body"]["model"] == "m"
    assert "logprobs" not in call["body"]


def test_transient_failures_are_tried_again_and_a_bad_request_is_not() -> None:
    seen: list[dict[str, Any]] = []

    async def go() -> Any:
        async with server(
            [(500, {"error": {"message": "overloaded"}}), (429, {"error": {"message": "slow down"}})], seen
        ) as url:
            return await HttpUpstream(ModelSpec(api="openai-chat", base_url=url, model="m")).reply(conv())

    assert run(go).text == "done" and len(seen) == 3
    seen.clear()

    async def bad() -> Any:
        async with server([(400, {"error": {"message": "tools must be a list"}})], seen) as url:
            return await HttpUpstream(ModelSpec(api="openai-chat", base_url=url, model="m")).reply(conv())

    with pytest.raises(UpstreamError) as caught:
        run(bad)
    assert caught.value.status == 400 and caught.value.kind == "invalid_request_error" and len(seen) == 1
    assert "tools must be a list" in str(caught.value)


def test_a_too_long_prompt_is_the_context_window_error() -> None:
    too_long = {"error": {"message": "This model's maximum context length is 4096 tokens.", "code": None}}

    async def go() -> Any:
        async with server([(400, too_long)], []) as url:
            return await HttpUpstream(ModelSpec(api="openai-chat", base_url=url, model="m")).reply(conv())

    with pytest.raises(UpstreamError) as caught:
        run(go)
    assert caught.value.code == "context_length_exceeded"


def test_a_dead_endpoint_is_unavailable_after_its_attempts() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    spec = ModelSpec(api="openai-chat", base_url=f"http://127.0.0.1:{port}/v1", model="m")

    async def go() -> Any:
        try:
            return await HttpUpstream(spec).reply(conv())
        finally:
            await openai_chat.close_sessions()

    with pytest.raises(UpstreamError) as caught:
        run(go)
    assert caught.value.status == 502 and "cannot reach" in str(caught.value) and caught.value.unreachable


def test_vllm_token_fields_are_read() -> None:
    reply = openai_chat.read_reply(
        {
            "prompt_token_ids": [1, 2, 3],
            "choices": [
                {
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": "hi"},
                    "logprobs": {
                        "content": [{"token": "token_id:7", "logprob": -0.5}, {"token": "token_id:8", "logprob": -0.25}]
                    },
                }
            ],
        }
    )
    assert reply.tokens == {
        "prompt_token_ids": [1, 2, 3],
        "generation_token_ids": [7, 8],
        "generation_log_probs": [-0.5, -0.25],
    }
