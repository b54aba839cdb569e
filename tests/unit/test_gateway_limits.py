"""The gateway's limits under load, over real HTTP: budgets hold against parallel calls.

The upstream here holds every call it is given until the test has seen each of the 30 requests
either reach it or be refused, so every admitted call is still in flight while the others are
judged: no sleeps, no timing, the outcome is decided by the gateway's bookkeeping alone.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from anyswe.gateway import Budget, Conversation, Gateway, Reply, ScriptedModel
from anyswe.gateway.wire import Protocol

pytestmark = pytest.mark.anyio

PARALLEL = 30
ROUTES: dict[Protocol, str] = {
    "anthropic-messages": "/v1/messages",
    "openai-chat": "/v1/chat/completions",
    "openai-responses": "/v1/responses",
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class HeldUpstream:
    """The scripted model, but each call waits at a gate the test opens."""

    def __init__(self) -> None:
        self.model = ScriptedModel(["ls"])
        self.gate = asyncio.Event()
        self.entered = 0
        self.changed = asyncio.Event()

    async def reply(self, conv: Conversation) -> Reply:
        self.entered += 1
        self.changed.set()
        await self.gate.wait()
        return self.model.reply(conv)


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Gateway]:
    async with Gateway(socket_dir=tmp_path / "sock") as gw:
        await gw.start()
        yield gw


def _body(protocol: Protocol, stream: bool, cap: bool = True) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "m", "stream": stream}
    if protocol == "openai-responses":
        return {**body, "input": "fix it", **({"max_output_tokens": 64} if cap else {})}
    return {**body, "messages": [{"role": "user", "content": "fix it"}], **({"max_tokens": 64} if cap else {})}


async def _parallel(
    gw: Gateway, token: str, upstream: HeldUpstream, protocol: Protocol, stream: bool, cap: bool = True
) -> list[Any]:
    """PARALLEL concurrent calls; the gate opens once each has reached the upstream or been refused."""
    refused = 0
    url = gw.url() + ROUTES[protocol]
    headers = {"x-api-key": token, "Authorization": f"Bearer {token}"}

    async def one(session: aiohttp.ClientSession) -> tuple[int, str]:
        nonlocal refused
        async with session.post(url, json=_body(protocol, stream, cap), headers=headers) as r:
            text = await r.text()
            if r.status != 200:
                refused += 1
                upstream.changed.set()
            return r.status, text

    async with aiohttp.ClientSession() as session:
        calls = [asyncio.ensure_future(one(session)) for _ in range(PARALLEL)]
        for _ in range(PARALLEL * 2):  # bounded: each pass is one call reaching the upstream or refused
            if upstream.entered + refused >= PARALLEL:
                break
            upstream.changed.clear()
            await asyncio.wait(
                [asyncio.ensure_future(upstream.changed.wait()), *calls], return_when=asyncio.FIRST_COMPLETED
            )
        upstream.gate.set()
        return list(await asyncio.gather(*calls))


def _answered(results: list[tuple[int, str]], protocol: Protocol, stream: bool) -> int:
    """How many calls got a model answer; every other one must be a budget refusal in the protocol's shape."""
    answered = 0
    for status, text in results:
        if status == 200:
            answered += 1
            assert ("data: " in text) if stream else ("usage" in json.loads(text))
            continue
        assert status == 401, text
        body = json.loads(text)
        if protocol == "anthropic-messages":
            assert body["type"] == "error" and body["error"]["type"] == "authentication_error"
        else:
            assert body["error"]["type"] == "authentication_error" and body["error"]["code"] == "401"
        assert "anyswe budget exhausted" in body["error"]["message"]
    return answered


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("protocol", list(ROUTES))
async def test_a_call_budget_holds_against_parallel_calls(
    gateway: Gateway, tmp_path: Path, protocol: Protocol, stream: bool
) -> None:
    upstream = HeldUpstream()
    token = gateway.grant("t", "m", upstream, trajectory=tmp_path / "traj.jsonl", budget=Budget(calls=2))
    results = await _parallel(gateway, token, upstream, protocol, stream)
    assert _answered(results, protocol, stream) == 2 and upstream.entered == 2
    used = gateway.revoke(token)
    assert used.calls == 2 and used.exhausted == "calls (2)" and used.pending_calls == 0
    assert len((tmp_path / "traj.jsonl").read_text().splitlines()) == 2


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_a_token_budget_holds_against_parallel_calls(gateway: Gateway, stream: bool) -> None:
    """Each admitted call holds its bound (body bytes + max_tokens): three fit, the rest are refused."""
    bound = len(json.dumps(_body("openai-chat", stream))) + 64
    upstream = HeldUpstream()
    token = gateway.grant("t", "m", upstream, budget=Budget(tokens=3 * bound))
    results = await _parallel(gateway, token, upstream, "openai-chat", stream)
    assert _answered(results, "openai-chat", stream) == 3 and upstream.entered == 3
    used = gateway.revoke(token)
    total = used.usage.input_tokens + used.usage.output_tokens
    assert used.calls == 3 and 0 < total <= 3 * bound and used.pending_tokens == 0


async def test_a_request_without_an_output_cap_holds_the_whole_budget(gateway: Gateway) -> None:
    """No max_tokens: the call may use all that is left, so calls alongside it are refused."""
    upstream = HeldUpstream()
    token = gateway.grant("t", "m", upstream, budget=Budget(tokens=10_000))
    results = await _parallel(gateway, token, upstream, "openai-chat", False, cap=False)
    assert sum(s == 200 for s, _ in results) == 1 and upstream.entered == 1


async def test_a_failed_call_gives_its_reservation_back(gateway: Gateway) -> None:
    from anyswe.gateway.errors import UpstreamError

    class FailsOnce:
        def __init__(self) -> None:
            self.failed = False

        def reply(self, conv: Conversation) -> Reply:
            if not self.failed:
                self.failed = True
                raise UpstreamError(529, "overloaded")
            return ScriptedModel(["ls"]).reply(conv)

    token = gateway.grant("t", "m", FailsOnce(), budget=Budget(calls=1))
    statuses = []
    async with aiohttp.ClientSession() as session:
        for _ in range(3):
            async with session.post(
                gateway.url() + "/v1/messages", json=_body("anthropic-messages", False), headers={"x-api-key": token}
            ) as r:
                statuses.append(r.status)
    assert statuses == [529, 200, 401]
    used = gateway.revoke(token)
    assert used.calls == 1 and used.upstream_errors == 1 and used.pending_calls == 0
