"""The gateway's limits over real HTTP: budgets hold against parallel calls; its own caps on request
size, recorded bytes per task and slow clients.

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
import anthropic
import pytest

from anyswe.gateway import Budget, Conversation, Gateway, Reply, ScriptedModel
from anyswe.gateway.grants import Limits
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


@pytest.mark.parametrize("api", ["openai-chat", "anthropic-messages"])  # direct, and through litellm
async def test_an_upstream_with_no_server_is_cut_off_after_two_calls_but_an_overloaded_one_is_not(
    gateway: Gateway, monkeypatch: pytest.MonkeyPatch, api: Protocol
) -> None:
    """A dead endpoint (nothing listens): two calls, each after the gateway's own retries, then every
    call is a 401, which no agent retries, and the grant says why. A 503 from a server that is there is
    passed on each time: the agent's retries may get through."""
    import socket

    from anyswe.gateway import openai_chat, upstream
    from anyswe.gateway.grants import UNREACHABLE_CALLS
    from anyswe.model import ModelSpec

    monkeypatch.setattr(openai_chat, "BACKOFF", 0.01)
    monkeypatch.setattr(upstream, "RETRIES", 0)  # litellm's backoff: seconds per call
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]  # closed again: nothing listens there

    async def statuses(token: str, n: int) -> list[int]:
        out = []
        async with aiohttp.ClientSession() as session:
            for _ in range(n):
                body = _body("openai-chat", False)
                async with session.post(
                    gateway.url() + ROUTES["openai-chat"], json=body, headers={"Authorization": f"Bearer {token}"}
                ) as r:
                    out.append(r.status)
                    text = await r.text()
        assert UNREACHABLE_CALLS == 2 and ("unreachable" in text) == (out[-1] == 401), text
        return out

    base = f"http://127.0.0.1:{dead}" + ("/v1" if api == "openai-chat" else "")
    token = gateway.grant("t", "m", upstream.HttpUpstream(ModelSpec(api=api, base_url=base, model="m")))
    first, *then = await statuses(token, 4)
    assert first in (500, 502) and then == [401, 401, 401], (first, then)  # litellm says 500, the direct path 502
    used = gateway.revoke(token)
    assert used.upstream_errors == 2 and used.down is not None and "2 calls in a row" in used.down

    class Overloaded:
        def reply(self, conv: Conversation) -> Reply:
            from anyswe.gateway.errors import UpstreamError

            raise UpstreamError(503, "overloaded")

    token = gateway.grant("t2", "m", Overloaded())
    assert await statuses(token, 4) == [503] * 4
    used = gateway.revoke(token)
    assert used.upstream_errors == 4 and used.down is None and used.unavailable is not None


async def test_an_agent_that_goes_away_mid_call_cancels_its_upstream_call(gateway: Gateway) -> None:
    """Its connection closed (an agent stopped at its deadline): the upstream call is cancelled, not left
    generating for nobody, and its reservation is given back."""
    upstream = HeldUpstream()
    cancelled = asyncio.Event()
    held = upstream.reply

    async def reply(conv: Conversation) -> Reply:
        try:
            return await held(conv)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    upstream.reply = reply  # type: ignore[method-assign]
    token = gateway.grant("t", "m", upstream, budget=Budget(calls=5))
    async with aiohttp.ClientSession() as session:
        call = asyncio.ensure_future(
            session.post(
                gateway.url() + "/v1/messages", json=_body("anthropic-messages", False), headers={"x-api-key": token}
            )
        )
        await upstream.changed.wait()  # the call is at the upstream
        call.cancel()  # the agent goes away
        with pytest.raises(asyncio.CancelledError):
            await call
    await asyncio.wait_for(cancelled.wait(), 30)
    used = gateway.revoke(token)
    assert (used.calls, used.pending_calls, used.pending_tokens) == (0, 0, 0)


async def test_closing_the_gateway_does_not_wait_for_calls_in_flight(tmp_path: Path) -> None:
    """A call whose upstream never answers (a gate never opened): close still returns, the call cancelled."""
    upstream = HeldUpstream()
    async with aiohttp.ClientSession() as session:
        gw = Gateway()
        await gw.start()
        token = gw.grant("t", "m", upstream)
        call = asyncio.ensure_future(
            session.post(
                gw.url() + "/v1/messages", json=_body("anthropic-messages", False), headers={"x-api-key": token}
            )
        )
        await upstream.changed.wait()
        await asyncio.wait_for(gw.close(), 30)  # aiohttp's default would wait for the handler: forever here
        with pytest.raises(aiohttp.ClientError):
            await call


# -- the gateway's own caps: request size, recorded bytes per task, slow clients ---------------------


async def test_an_oversized_body_is_refused_in_the_protocols_shape(tmp_path: Path) -> None:
    async with Gateway(limits=Limits(request_bytes=4096)) as gw:
        await gw.start()
        token = gw.grant("t", "m", ScriptedModel(["ls"]), trajectory=tmp_path / "traj.jsonl")
        client = anthropic.AsyncAnthropic(base_url=gw.url(), api_key=token, max_retries=0)
        big = [{"role": "user", "content": "x" * 8192}]
        with pytest.raises(anthropic.APIStatusError) as info:
            await client.messages.create(model="m", max_tokens=10, messages=big)  # type: ignore[arg-type]
        assert info.value.status_code == 413 and info.value.body["error"]["type"] == "request_too_large"  # type: ignore[index]
        await client.close()

        async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: caught while reading
            yield b'{"model": "m", "messages": [{"role": "user", "content": "'
            for _ in range(8):
                yield b"x" * 1024
            yield b'"}]}'

        async with aiohttp.ClientSession() as session:
            url = gw.url() + "/v1/chat/completions"
            async with session.post(url, data=chunks(), headers={"Authorization": f"Bearer {token}"}) as r:
                assert r.status == 413 and (await r.json())["error"]["type"] == "request_too_large"
        used = gw.revoke(token)
        assert used.calls == 0 and not (tmp_path / "traj.jsonl").exists()


async def test_a_task_past_its_recording_cap_is_refused_and_that_is_recorded(tmp_path: Path) -> None:
    body = _body("openai-chat", False)
    size = len(json.dumps(body).encode())
    async with Gateway(limits=Limits(task_bytes=3 * size)) as gw:
        await gw.start()
        token = gw.grant("t", "m", ScriptedModel(["ls"]), trajectory=tmp_path / "traj.jsonl")  # no budget
        statuses = []
        async with aiohttp.ClientSession() as session:
            for _ in range(5):
                headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
                async with session.post(gw.url() + "/v1/chat/completions", data=json.dumps(body), headers=headers) as r:
                    statuses.append((r.status, (await r.json()).get("error", {}).get("message", "")))
        assert [s for s, _ in statuses] == [200, 200, 200, 401, 401]
        assert "budget exhausted: recorded bytes" in statuses[3][1]
        used = gw.revoke(token)
        assert used.calls == 3 and used.recorded == 3 * size and used.refused == 2
        assert used.exhausted == f"recorded bytes ({3 * size})"
    lines = [json.loads(x) for x in (tmp_path / "traj.jsonl").read_text().splitlines()]
    assert len(lines) == 4 and lines[-1]["refused"] == used.exhausted and lines[-1]["request_bytes"] == size
    # A replay of this task serves the three answered calls; the noted refusal is no call.
    from anyswe.gateway.replay import ReplayModel

    assert len(ReplayModel.load(tmp_path / "traj.jsonl").steps) == 3


async def test_a_task_without_a_budget_is_held_to_the_gateways_call_cap(tmp_path: Path) -> None:
    body = _body("openai-chat", False)
    async with Gateway(limits=Limits(task_calls=2)) as gw:
        await gw.start()
        token = gw.grant("t", "m", ScriptedModel(["ls"] * 10), trajectory=tmp_path / "traj.jsonl")  # no budget
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        async with aiohttp.ClientSession() as session:

            async def call() -> int:
                async with session.post(gw.url() + "/v1/chat/completions", data=json.dumps(body), headers=headers) as r:
                    return r.status

            statuses = await asyncio.gather(*(call() for _ in range(12)))  # at once: admitted atomically
        assert sorted(statuses) == [200, 200] + [401] * 10, statuses
        used = gw.revoke(token)
        assert used.calls == 2 and used.exhausted == "calls (the gateway's cap, 2)"


async def _closed(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, trickle: bytes) -> bytes:
    """Keep sending ``trickle`` a byte at a time until the gateway closes the connection; what it sent back.

    Bounded: 600 rounds of at most 0.1 s each; a connection still open after them fails the test.
    """
    got = b""
    for i in range(600):
        if trickle:
            try:
                writer.write(trickle[i % len(trickle) : i % len(trickle) + 1])
                await writer.drain()
            except ConnectionError:
                return got
        try:
            chunk = await asyncio.wait_for(reader.read(65536), 0.1)
        except TimeoutError:
            continue
        except ConnectionError:
            return got
        if not chunk:
            return got
        got += chunk
    raise AssertionError(f"the gateway kept a slow connection open (sent {got!r})")


async def test_a_client_that_sends_headers_slowly_is_disconnected() -> None:
    async with Gateway(limits=Limits(header_seconds=0.5)) as gw:
        await gw.start()
        reader, writer = await asyncio.open_connection("127.0.0.1", gw.ports["127.0.0.1"])
        writer.write(b"POST /v1/messages HTTP/1.1\r\nHost: gw\r\n")
        got = await _closed(reader, writer, b"X-Slow: aaaaaaaa\r\n")  # never the blank line
        writer.close()
        assert got == b""  # closed unanswered


async def test_a_client_that_sends_its_body_slowly_gets_a_timeout_and_is_disconnected() -> None:
    async with Gateway(limits=Limits(body_seconds=0.5)) as gw:
        await gw.start()
        token = gw.grant("t", "m", ScriptedModel(["ls"]))
        reader, writer = await asyncio.open_connection("127.0.0.1", gw.ports["127.0.0.1"])
        head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {token}\r\n"
        writer.write((head + "Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{").encode())
        got = await _closed(reader, writer, b"")
        writer.close()
        assert got.startswith(b"HTTP/1.1 408") and b'"type": "timeout_error"' in got
        assert gw.revoke(token).calls == 0


@pytest.mark.parametrize("depth", [300, 1000, 5000])
async def test_a_request_nested_past_what_a_step_can_hold_is_a_400_and_nothing_is_lost(
    tmp_path: Path, depth: int
) -> None:
    """About 1,000 levels were accepted, then could not be written as a trajectory step: the task was
    infra, masked and run again (a free re-roll the agent could buy). Now the agent gets a 400, and a
    call it makes after is answered and recorded as any other."""
    async with Gateway() as gw:
        await gw.start()
        token = gw.grant("t", "m", ScriptedModel(["ls"]), trajectory=tmp_path / "traj.jsonl")
        nested = "[" * depth + "]" * depth
        deep = '{"model": "m", "messages": [{"role": "user", "content": "hi"}], "metadata": ' + nested + "}"
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        async with aiohttp.ClientSession() as session:
            url = gw.url() + "/v1/chat/completions"
            async with session.post(url, data=deep, headers=headers) as r:
                assert r.status == 400, await r.text()
                assert "nests deeper" in (await r.json())["error"]["message"]
            async with session.post(url, data=json.dumps(_body("openai-chat", False)), headers=headers) as r:
                assert r.status == 200
        used = gw.revoke(token)
        assert used.calls == 1 and used.unrecorded is None and used.unrecordable is None
    assert len((tmp_path / "traj.jsonl").read_text().splitlines()) == 1


def test_a_step_the_agents_content_keeps_from_being_written_is_the_agents_failure(tmp_path: Path) -> None:
    """What the agent sent that cannot become a step (here: past Python's recursion, built directly) is the
    agent's failure, one attempt; the host's disk failing to take it is the gateway's (infra)."""
    from anyswe.gateway.grants import Grant
    from anyswe.gateway.trajectory import Answered, flush
    from anyswe.gateway.wire import read_request

    body = _body("openai-chat", False)
    conv = read_request("openai-chat", body)
    deep: Any = []
    for _ in range(5000):
        deep = [deep]
    grant = Grant(key="t", model="m", upstream=ScriptedModel(["ls"]), trajectory=tmp_path / "traj.jsonl")
    reply = ScriptedModel(["ls"]).reply(conv)
    grant.unwritten.append(Answered("openai-chat", {**body, "metadata": deep}, conv, reply, 0.0, 0.0, 1, None))
    flush(grant)
    assert grant.unrecorded is None and grant.unrecordable is not None
    assert "cannot be recorded" in grant.unrecordable
    # The grant settles it into the attempt as the agent's own failure: counted, not masked, not run again.
    from anyswe.execute.models import settle
    from anyswe.execute.outcome import Outcome
    from anyswe.execute.record import Identity, Record
    from anyswe.execute.unit import TaskOutput

    identity = Identity(key=f"{0:016x}__i", cell="a.m.p", agent="a", provider="p", instance_id="i")
    row = settle(TaskOutput(Outcome(record=Record(identity), tests_resolved=False)), grant, tmp_path).result
    assert (row.error_kind, row.mask_sample, row.retryable) == ("agent", False, False), row.error


def test_a_trajectory_line_nested_past_pythons_parser_is_a_located_problem(tmp_path: Path) -> None:
    from anyswe.gateway.trajectory import read_trajectory

    path = tmp_path / "trajectory.jsonl"
    path.write_text("[" * 5000 + "]" * 5000 + "\n")
    problems: list[str] = []
    assert read_trajectory(path, problems=problems) == []
    assert problems == [f"{path}:1: not a step (JSON nested deeper than can be read)"]
