"""Each gateway sandbox gets a socket of its own task, read-only, on both runtimes.

A task that could remove or replace the socket it reaches the gateway through could break every
later task, or put a relay of its own in its place and read another task's token. Here two tasks run
at once: each sees only its own socket, cannot remove, rename or add to its directory, and both
still make their calls; a task's socket serves only that task's token.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from anyswe.gateway import Gateway, ScriptedModel
from anyswe.sandbox import Gateway as GatewaySocket
from anyswe.sandbox import SandboxRequest, get_provider
from anyswe.sandbox.base import Sandbox
from anyswe.sandbox.request import GATEWAY_DIR

pytestmark = pytest.mark.containers

CLIENT = r"""
import json, sys, urllib.error, urllib.request
url, token = sys.argv[1], sys.argv[2]
body = {"model": "m", "messages": [{"role": "user", "content": "fix"}]}
req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                             headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
try:
    print(urllib.request.urlopen(req, timeout=30).status)
except urllib.error.HTTPError as e:
    print(e.code)
"""
SOCK = f"{GATEWAY_DIR}/gateway.sock"


async def _call(sb: Sandbox, token: str) -> str:
    r = await sb.exec(["python3", "/tmp/client.py", f"http://{sb.gateway_address}", token], timeout=60)
    assert r.exit_code == 0, r
    return r.stdout.strip()


async def _tamper(sb: Sandbox, other: Path) -> list[tuple[int, str]]:
    """What a task may try on its socket: remove, rename, add a file beside it, reach another's."""
    argvs = [
        ["rm", "-f", SOCK],
        ["mv", SOCK, f"{GATEWAY_DIR}/old.sock"],
        ["mv", SOCK, "/tmp/gateway.sock"],
        ["touch", f"{GATEWAY_DIR}/relay.sock"],
        ["ls", "-a", str(other.parent)],
    ]
    return [((r := await sb.exec(argv)).exit_code, r.stdout + r.stderr) for argv in argvs]


def test_each_task_has_its_own_read_only_socket(provider_image: tuple[str, str], tmp_path: Path) -> None:
    name, image = provider_image

    async def go() -> None:
        async with Gateway(socket_dir=tmp_path / "gw") as gw:
            await gw.start()
            tokens = [gw.grant(k, "m", ScriptedModel(["make test"])) for k in ("a", "b")]
            sockets = [await gw.open_socket(t) for t in tokens]
            assert sockets[0].parent != sockets[1].parent and all(s.is_socket() for s in sockets)
            provider = get_provider(name)
            requests = [SandboxRequest(image, network="gateway", gateway=GatewaySocket(str(s))) for s in sockets]
            async with provider.sandbox(requests[0]) as a, provider.sandbox(requests[1]) as b:
                for sb in (a, b):
                    await sb.write_file("/tmp/client.py", CLIENT.encode())
                for code, out in await _tamper(a, sockets[1]):
                    assert code != 0, out
                listing = await a.exec(["ls", "-a", GATEWAY_DIR])
                assert listing.stdout.split() == [".", "..", "gateway.sock"], listing
                found = await a.exec(["sh", "-c", "find / -xdev -type s -name '*.sock' 2>/dev/null; true"])
                assert str(sockets[1]) not in found.stdout
                assert sockets[0].is_socket()  # still there, on the host as in the sandbox
                # Both tasks call at once, each through its own socket; another's token is refused there.
                answers = await asyncio.gather(_call(a, tokens[0]), _call(b, tokens[1]), _call(a, tokens[1]))
                assert answers == ["200", "200", "401"]
            used = [gw.revoke(t) for t in tokens]
            assert [u.calls for u in used] == [1, 1]
            assert not any(s.exists() or s.parent.exists() for s in sockets)  # revoked: removed

    asyncio.run(go())
