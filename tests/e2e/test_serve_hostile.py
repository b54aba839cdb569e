"""``anyswe serve`` against a hostile client (issue 31), on docker and on apptainer: the real server as
``anyswe serve`` starts it, with a key planted in its environment, a listener of the client's own on
loopback, and the requests that read the server's environment, sent its key to the client and ran a
sandbox on the host network on 21edcb3. Each is a 401 or a 400 naming its field; the planted value is
in no answer; the listener is never called; no sandbox of the server's runs for any of them. Then one
request the server's config allows runs on that runtime (so "no sandbox" is not a server that cannot
start one).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gymkit import AUTH, serve_argv, started

from anyswe.datasets import load_dataset

pytestmark = [pytest.mark.containers, pytest.mark.usefixtures("runtimes")]

PLANTED = "planted-serve-secret-of-issue-31"


class Listener:
    """A TCP listener of the client's own on loopback: counts every connection anything makes to it."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    found = Listener()
    yield found
    found.close()


def _sandboxes(provider: str, run_id: str) -> list[str]:
    from anyswe.sandbox import get_provider

    found = asyncio.run(get_provider(provider).sandboxes())
    return [n for n, labels in found.items() if (labels or {}).get("anyswe.run_id") == run_id]


async def _ask(url: str, bodies: list[tuple[dict[str, Any] | bytes, dict[str, str]]]) -> list[tuple[int, str]]:
    import aiohttp

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
        answers = []
        for body, headers in bodies:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            async with session.post(url + "/run", data=data, headers=headers) as resp:
                answers.append((resp.status, await resp.text()))
        return answers


@pytest.mark.parametrize("runtime", ["docker", "apptainer"])
def test_a_hostile_client_gets_nothing_and_runs_nothing(runtime: str, tmp_path: Path, listener: Listener) -> None:
    config = tmp_path / "serve.yaml"
    config.write_text(
        json.dumps(
            {
                "agent": {"type": "gold"},
                "model": {"api": "scripted", "protocol": "openai-chat"},
                "provider": runtime,
                "dataset": "demo",
                "concurrency": 2,
            }
        )
    )
    proc, url = started(serve_argv(config), env={**os.environ, "PLANTED_KEY": PLANTED})
    try:
        inst = load_dataset("demo").by_id()["demo__calc-1"]
        meta = {"instance_id": inst.instance_id, "dataset_name": "demo", "instance_dict": inst.model_dump(mode="json")}
        row: dict[str, Any] = {"responses_create_params": {"input": [], "metadata": meta}}
        evil_model = {
            "api": "openai-chat",
            "base_url": f"http://127.0.0.1:{listener.port}/v1",
            "api_key_env": "PLANTED_KEY",
        }
        host_net = {"type": runtime, "network": "host", "memory": None, "pids_limit": None}
        hostile: list[tuple[str, dict[str, Any] | bytes, dict[str, str], int, str]] = [
            ("no token", row, {}, 401, "unauthorized"),
            ("wrong token", row, {"Authorization": "Bearer " + "0" * 43}, 401, "unauthorized"),
            ("environ", {**row, "anyswe": {"agent": {"type": "os:environ"}}}, AUTH, 400, "anyswe.agent"),
            ("provider path", {**row, "anyswe": {"provider": {"type": "os:environ"}}}, AUTH, 400, "anyswe.provider"),
            ("key to listener", {**row, "anyswe": {"model": evil_model}}, AUTH, 400, "anyswe.model"),
            ("host network", {**row, "anyswe": {"provider": host_net}}, AUTH, 400, "anyswe.provider"),
            ("image", {**row, "anyswe": {"image": "anyswe-test/other:1"}}, AUTH, 400, "anyswe.image"),
            ("timeouts", {**row, "anyswe": {"timeouts": {"agent": 1e9}}}, AUTH, 400, "anyswe.timeouts"),
            ("deep", b"[" * 100_000 + b"]" * 100_000, AUTH, 400, "nests deeper than 64"),
        ]  # fmt: skip
        answers = asyncio.run(_ask(url, [(body, headers) for _, body, headers, _, _ in hostile]))
        for (name, _, _, status, words), (got, text) in zip(hostile, answers, strict=True):
            assert got == status and words in json.loads(text)["error"], (name, got, text)
            assert PLANTED not in text, name
        health = json.loads(asyncio.run(_health(url)))
        assert PLANTED not in json.dumps(health) and health["served"] == 0
        assert listener.accepted == 0  # the server never called the client's URL
        assert _sandboxes(runtime, health["run_id"]) == []  # nothing of any of them started

        # What the config allows runs, on this runtime, with the token.
        ((status, text),) = asyncio.run(_ask(url, [(row, AUTH)]))
        assert status == 200, text
        answer = json.loads(text)
        assert answer["resolved"] is True and answer["instance_config"]["provider"] == runtime, answer
        assert PLANTED not in text and listener.accepted == 0
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    assert proc.stdout is not None
    out = proc.stdout.read()
    assert PLANTED not in out and "every sandbox removed" in out


async def _health(url: str) -> str:
    import aiohttp

    async with aiohttp.ClientSession() as session, session.get(url + "/health") as resp:
        return await resp.text()
