"""The relay a Ray node runs for units whose gateway is on another machine: real HTTP through it,
over its loopback port (an SDK, streamed) and its unix socket (what sandboxes mount), to a real
gateway listening on another address of this machine; the grant's usage and trajectory are the
gateway's as without a relay."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import openai
import pytest

from anyswe.errors import RuntimeNotAvailable
from anyswe.gateway import Gateway, ScriptedModel
from anyswe.gateway.relay import Relay, join_address, split_address
from anyswe.model import ModelEndpoint

pytestmark = pytest.mark.anyio

STEPS = ["ls /testbed"]
BASH = {
    "type": "function",
    "function": {"name": "bash", "parameters": {"type": "object", "properties": {"command": {}}}},
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Gateway]:
    async with Gateway(socket_dir=tmp_path / "sock") as gw:
        # The address nodes reach: another loopback address than the one the relay listens on.
        await gw.start(("127.0.0.1", "127.0.0.2"))
        yield gw


async def _raw_over_unix(socket: str, token: str) -> tuple[str, dict[str, object]]:
    reader, writer = await asyncio.open_unix_connection(socket)
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "fix"}], "tools": [BASH]}).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    writer.write(head.encode() + body)
    await writer.drain()
    reply = await reader.read()
    writer.close()
    status, _, rest = reply.partition(b"\r\n")
    return status.decode(), json.loads(rest.partition(b"\r\n\r\n")[2])


async def test_calls_through_the_relay_reach_the_gateway_and_count(gateway: Gateway, tmp_path: Path) -> None:
    trajectory = tmp_path / "traj.jsonl"
    token = gateway.grant("t", "m", ScriptedModel(STEPS, submit="echo done"), trajectory=trajectory)
    remote = ModelEndpoint(
        name="m", api="openai-chat", model="m", token=token, relay=f"127.0.0.2:{gateway.ports['127.0.0.2']}"
    )
    async with Relay(str(remote.relay)) as relay:
        local = relay.endpoint(remote)
        assert local.relay is None and local.socket == str(relay.socket) and relay.socket is not None
        assert local.base_url == f"http://127.0.0.1:{relay.local_port}"
        client = openai.AsyncOpenAI(base_url=f"{local.base_url}/v1", api_key=token, max_retries=0)
        try:
            stream = await client.chat.completions.create(
                model="m",
                messages=[{"role": "user", "content": "fix"}],
                tools=[BASH],
                stream=True,  # type: ignore[list-item]
            )
            args = ""
            async for chunk in stream:
                for choice in chunk.choices:
                    for tc in choice.delta.tool_calls or []:
                        args += tc.function.arguments or ""  # type: ignore[union-attr]
            assert json.loads(args) == {"command": STEPS[0]}
        finally:
            await client.close()
        status, reply = await _raw_over_unix(str(relay.socket), token)
        assert status == "HTTP/1.1 200 OK", reply
        assert reply["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "bash"  # type: ignore[index]
        status, _ = await _raw_over_unix(str(relay.socket), "anyswe-not-a-token")
        assert status.startswith("HTTP/1.1 401")
    assert not Path(str(relay.socket)).exists()  # the relay's socket goes with it
    grant = gateway.revoke(token)
    assert grant.calls == 2 and len(trajectory.read_text().splitlines()) == 2


async def test_a_relay_that_cannot_reach_its_gateway_says_so_before_the_unit_starts() -> None:
    with pytest.raises(RuntimeNotAvailable, match=r"cannot reach the model gateway at 127\.0\.0\.2:1 "):
        await Relay("127.0.0.2:1").reachable()


async def test_calls_that_cannot_reach_a_gateway_gone_meanwhile_are_counted(tmp_path: Path) -> None:
    async with Gateway(socket_dir=tmp_path / "sock") as gw:
        await gw.start()
        relay = Relay(f"127.0.0.1:{gw.ports['127.0.0.1']}")
        await relay.__aenter__()
    try:  # the gateway is closed now; the agent's connection is closed unanswered, and counted
        reader, writer = await asyncio.open_unix_connection(str(relay.socket))
        writer.write(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        assert await asyncio.wait_for(reader.read(), 30) == b""
        writer.close()
        assert relay.failures == 1 and "ConnectionRefusedError" in relay.last_failure
    finally:
        await relay.close()


async def test_closing_the_relay_ends_open_connections(gateway: Gateway) -> None:
    async with Relay(f"127.0.0.2:{gateway.ports['127.0.0.2']}") as relay:
        reader, writer = await asyncio.open_connection("127.0.0.1", relay.local_port)
        writer.write(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n")  # a request never finished
        await writer.drain()
        await asyncio.sleep(0.2)
    assert await asyncio.wait_for(reader.read(), 30) == b""  # closed by the relay, not left hanging
    writer.close()


def test_relay_addresses_are_checked() -> None:
    assert split_address("10.1.2.3:4000") == ("10.1.2.3", 4000)
    assert join_address("fe80::1", 4000) == "[fe80::1]:4000" and join_address("10.1.2.3", 1) == "10.1.2.3:1"
    assert split_address("[fe80::1]:4000") == ("fe80::1", 4000)
    for bad in ("10.1.2.3", ":4000", "host:port"):
        with pytest.raises(RuntimeNotAvailable, match="not host:port"):
            split_address(bad)
