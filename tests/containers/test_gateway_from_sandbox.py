"""An agent inside a sealed sandbox reaches the model gateway, and only it, on both runtimes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from anyswe.gateway import Gateway, ScriptedModel
from anyswe.sandbox import Gateway as GatewaySocket
from anyswe.sandbox import SandboxRequest, get_provider

pytestmark = pytest.mark.containers

CLIENT = r"""
import json, sys, urllib.request
url, token = sys.argv[1], sys.argv[2]
body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "fix"}],
        "tools": [{"type": "function", "function": {"name": "bash", "parameters": {"properties": {"command": {}}}}}]}
req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                             headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
print(urllib.request.urlopen(req, timeout=30).read().decode())
"""


def test_sealed_sandbox_calls_the_gateway(provider_image: tuple[str, str], tmp_path: Path) -> None:
    name, image = provider_image

    async def go() -> tuple[str, int]:
        async with Gateway(socket_dir=tmp_path / "gw") as gw:
            await gw.start()
            assert gw.socket is not None
            token = gw.grant("k", "m", ScriptedModel(["make test"]), trajectory=tmp_path / "traj.jsonl")
            request = SandboxRequest(image, network="gateway", gateway=GatewaySocket(str(gw.socket)))
            async with get_provider(name).sandbox(request) as sb:
                await sb.write_file("/tmp/client.py", CLIENT.encode())
                r = await sb.exec(["python3", "/tmp/client.py", f"http://{sb.gateway_address}", token], timeout=60)
                env = (await sb.exec(["env"])).stdout
            assert token not in env
            return r.stdout, gw.revoke(token).calls

    stream, calls = asyncio.run(go())
    events = [json.loads(line[6:]) for line in stream.splitlines() if line.startswith("data: {")]
    args = "".join(
        tc["function"].get("arguments", "")
        for e in events
        for c in e["choices"]
        for tc in c["delta"].get("tool_calls", [])
    )
    assert json.loads(args) == {"command": "make test"} and stream.rstrip().endswith("data: [DONE]")
    assert calls == 1 and len((tmp_path / "traj.jsonl").read_text().splitlines()) == 1
