"""Wire protocols are one registry: a protocol added by a package is served by the gateway at its own
path, read into the same conversation, answered in its own shape and recorded, and a model block
may name it; the built-in three keep their paths and litellm prefixes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import aiohttp
import pytest
from pydantic import ValidationError

from anyswe.gateway import Gateway, ScriptedModel
from anyswe.gateway.errors import UpstreamError
from anyswe.gateway.protocols import PROTOCOLS, WireProtocol, _instances, match_path, routes, wire_protocol
from anyswe.gateway.wire import Conversation, Known, Message, Reply
from anyswe.model import ModelSpec

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class EchoLines(WireProtocol):
    """A plugin's protocol: a request is ``{"model", "lines": [...]}``, a reply ``{"said", "calls"}``."""

    name: ClassVar[str] = "echo-lines"
    paths: ClassVar[tuple[str, ...]] = ("/v1/echo",)
    litellm_prefix: ClassVar[str] = "openai/"

    def messages(self, body: dict[str, Any], known: Known | None) -> tuple[list[Message], int]:
        return [Message("user", str(line)) for line in body["lines"]], 0

    def tool(self, entry: dict[str, Any]) -> tuple[dict[str, Any], Any] | None:
        return (entry, entry.get("schema")) if "name" in entry else None

    def render_json(self, reply: Reply, model: str) -> dict[str, Any]:
        return {"said": reply.text, "calls": [c.arguments for c in reply.tool_calls], "model": model}

    def render_stream(self, reply: Reply, model: str, include_usage: bool) -> Iterator[bytes]:
        yield json.dumps(self.render_json(reply, model)).encode()

    def render_error(self, status: int, message: str, kind: str, code: str | None = None) -> dict[str, Any]:
        return {"echo_error": message, "status": status, "why": code}


@pytest.fixture
def echo() -> Iterator[None]:
    PROTOCOLS.register(EchoLines.name, EchoLines)
    try:
        yield
    finally:
        PROTOCOLS._targets.pop(EchoLines.name, None)
        _instances.pop(EchoLines.name, None)


def test_the_built_in_protocols() -> None:
    assert routes() == {
        "/v1/chat/completions": "openai-chat",
        "/v1/responses": "openai-responses",
        "/v1/messages": "anthropic-messages",
    }
    prefixes = {n: wire_protocol(n).litellm_prefix for n in PROTOCOLS.names()}
    assert prefixes == {
        "openai-chat": "openai/",
        "openai-responses": "openai/responses/",
        "anthropic-messages": "anthropic/",
        "google-generate-content": "gemini/",
    }
    # Gemini names the model (and streaming) in the path: matched, not a fixed route.
    assert match_path("/v1beta/models/gemini-x:streamGenerateContent") == (
        "google-generate-content",
        {"model": "gemini-x", "stream": True},
    )
    assert match_path("/v1beta/models/gemini-x:countTokens") is None


def test_a_model_block_names_a_registered_protocol_only(echo: None) -> None:
    assert ModelSpec(api="echo-lines", model="m").agent_protocol == "echo-lines"
    assert ModelSpec(api="scripted", protocol="echo-lines").agent_protocol == "echo-lines"
    with pytest.raises(ValidationError, match="unknown protocol 'gemini'; known: openai-chat, openai-responses"):
        ModelSpec(api="gemini", model="m")


async def test_the_gateway_serves_a_plugins_protocol(echo: None, tmp_path: Path) -> None:
    async with Gateway(socket_dir=tmp_path / "sock") as gw:
        await gw.start()
        trajectory = tmp_path / "traj.jsonl"
        token = gw.grant("task-1", "m", ScriptedModel(["ls /testbed"], submit="echo done"), trajectory=trajectory)
        body = {"model": "m", "lines": ["fix the bug"], "tools": [{"name": "bash", "schema": {"type": "object"}}]}
        headers = {"Authorization": f"Bearer {token}"}
        async with aiohttp.ClientSession() as http:
            async with http.post(gw.url() + "/v1/echo", json=body, headers=headers) as r:
                assert r.status == 200, await r.text()
                reply = await r.json()
            async with http.post(gw.url() + "/v1/echo", json=body, headers={"Authorization": "Bearer nope"}) as r:
                refused = (r.status, await r.json())
    # The scripted model's first step, as a call of the tool the request offered, in the plugin's shape.
    assert reply == {"said": "", "calls": [{"command": "ls /testbed"}], "model": "m"}
    assert refused[0] == 401 and "echo_error" in refused[1]
    (line,) = [json.loads(x) for x in trajectory.read_text().splitlines()]
    assert line["protocol"] == "echo-lines" and line["request"]["lines"] == ["fix the bug"]


class TooLong:
    async def reply(self, conv: Conversation) -> Reply:
        raise UpstreamError(400, "prompt too long", kind="invalid_request_error", code="context_length_exceeded")


async def test_an_upstreams_error_reaches_a_plugins_agent_in_the_plugins_shape(echo: None, tmp_path: Path) -> None:
    """Before, the server wrote the upstream's code into body["error"], a key of OpenAI's shape: a 500 here."""
    async with Gateway(socket_dir=tmp_path / "sock") as gw:
        await gw.start()
        token = gw.grant("task-1", "m", TooLong(), trajectory=tmp_path / "traj.jsonl")
        async with aiohttp.ClientSession() as http:
            body = {"model": "m", "lines": ["fix the bug"]}
            async with http.post(gw.url() + "/v1/echo", json=body, headers={"Authorization": f"Bearer {token}"}) as r:
                status, answer = r.status, await r.json()
    assert (status, answer) == (400, {"echo_error": "prompt too long", "status": 400, "why": "context_length_exceeded"})
