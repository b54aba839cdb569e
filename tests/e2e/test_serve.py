"""``anyswe serve`` as NeMo Gym's anyswe_agent server (issue 23): an HTTP client posts rows shaped like
nemo-gym 0.7.0's own ``data/example.jsonl`` (its first row, with a demo task in its metadata) for
mini-swe-agent and Claude Code on docker and apptainer, with the scripted model; every response
validates against nemo-gym 0.7.0's ``AnySweVerifyResponse``, imported from the real package in an
environment of its own (tests/nemo_gym). A client that disconnects, and a SIGTERM, leave no sandbox.

How the fixtures differ from a Gym deployment: the policy is anyswe's scripted model (no model
server here), so no rollout prefix is routed; the tasks are the demo's SWE-bench-shaped ones.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gymkit import AUTH, GYM, gym_python, gym_rows, serve_argv, started, validate

__all__ = ["gym_python"]  # the fixture, used by name

pytestmark = [pytest.mark.containers, pytest.mark.usefixtures("runtimes")]

# A request names what this declares (its `anyswe` object holds names only, issue 31).
CONFIG = """\
agent: {type: mini-swe-agent, step_limit: 20}
agents: {claude: {type: claude-code, max_turns: 10}}
model: {api: scripted, protocol: openai-chat}
models:
  anthropic: {api: scripted, protocol: anthropic-messages}
  slow: {api: scripted, protocol: openai-chat, misbehave: slow, delay: 30}
provider: docker
providers:
  apptainer: apptainer
  apptainer-small: {type: apptainer, overlay_size_mb: 512}
  missing-image: {type: docker, image: "anyswe-test/no-such-image:none"}
dataset: demo-swebench
timeouts: {agent: 600, grading: 300}
concurrency: 4
"""
CLAUDE = {"agent": "claude", "model": "anthropic"}


class Served:
    def __init__(self, proc: subprocess.Popen[str], url: str) -> None:
        self.proc, self.url = proc, url

    def health(self) -> dict[str, Any]:
        import urllib.request

        with urllib.request.urlopen(self.url + "/health", timeout=30) as resp:
            return dict(json.loads(resp.read()))


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Served]:
    config = tmp_path / "serve.yaml"
    config.write_text(CONFIG)
    proc, url = started(serve_argv(config))
    try:
        yield Served(proc, url)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=120)


async def post(url: str, bodies: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    import aiohttp

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=900)) as session:

        async def one(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
            async with session.post(url + "/run", json=body, headers=AUTH) as resp:
                return resp.status, await resp.json()

        return await asyncio.gather(*(one(b) for b in bodies))


def sandboxes(run_id: str) -> list[str]:
    r = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=anyswe.run_id={run_id}"], capture_output=True, text=True, check=True
    )
    return r.stdout.split()


def test_gym_rows_for_two_agents_on_both_runtimes(server: Served, gym_python: Path, tmp_path: Path) -> None:
    ids = ["demo__calc-1", "demo__inventory-4"]
    rows = gym_rows(gym_python, ids)
    bodies = [
        rows[0],  # the server's own: mini-swe-agent on docker
        {**rows[1], "anyswe": {"provider": "apptainer"}},
        {**rows[0], "anyswe": {**CLAUDE, "provider": "default"}},
        {**rows[1], "anyswe": {**CLAUDE, "provider": "apptainer-small"}},
    ]
    answers = asyncio.run(post(server.url, bodies))
    for status, resp in answers:
        assert status == 200, resp
        assert resp["reward"] == 1.0 and resp["resolved"] and resp["patch_exists"], resp
        assert resp["mask_sample"] is False and resp["instance_config"]["mask_sample"] is False
        assert resp["error_kind"] is None and resp["agent_timed_out"] is False and resp["eval_timed_out"] is False
        assert resp["model_patch"].startswith("diff --git") and resp["agent_run_time"] > 0
        types = [item["type"] for item in resp["response"]["output"]]
        assert "function_call" in types and "function_call_output" in types, types
        assert resp["tests_status"]["FAIL_TO_PASS"]["failure"] == [] and resp["tests_status"]["FAIL_TO_PASS"]["success"]
    assert [(a[1]["instance_config"]["agent"], a[1]["instance_config"]["provider"]) for a in answers] == [
        ("mini-swe-agent", "docker"),
        ("mini-swe-agent", "apptainer"),
        ("claude-code", "docker"),
        ("claude-code", "apptainer"),
    ]
    parsed = validate(gym_python, [a[1] for a in answers], tmp_path)
    assert [p["reward"] for p in parsed] == [1.0] * 4 and not any(p["mask_sample"] for p in parsed)
    assert all("NeMoGymResponseFunctionToolCall" in p["output"] for p in parsed), parsed
    health = server.health()
    assert (health["served"], health["running"], health["waiting"]) == (4, 0, 0)
    assert sandboxes(health["run_id"]) == []


def test_a_masked_rollout_is_masked_in_both_places(server: Served, gym_python: Path, tmp_path: Path) -> None:
    """An image that does not exist: a permanent infra error, masked at the top level and in instance_config."""
    (row,) = gym_rows(gym_python, ["demo__calc-1"])
    body = {**row, "anyswe": {"provider": "missing-image"}}
    ((status, resp),) = asyncio.run(post(server.url, [body]))
    assert status == 200, resp
    assert resp["mask_sample"] is True and resp["instance_config"]["mask_sample"] is True
    assert (resp["reward"], resp["resolved"], resp["mask_reason"]) == (0.0, False, "infra")
    # Gym's names (its error_kind, nemo_gym.failure_kinds), and anyswe's own kind beside them.
    assert (resp["error_kind"], resp["anyswe_error_kind"], resp["failure_kind"]) == (
        "sandbox",
        "infra",
        "provider_unavailable",
    )
    assert (
        resp["error_permanent"] is True
        and "no-such-image" in resp["error"]
        and "no-such-image" in resp["failure_reason"]
    )
    (parsed,) = validate(gym_python, [resp], tmp_path)
    assert parsed["mask_sample"] is True and parsed["failure_kind"] == "provider_unavailable"


def test_bad_requests_are_refused_naming_the_field(server: Served) -> None:
    answers = asyncio.run(
        post(
            server.url,
            [
                {"responses_create_params": {"input": [], "metadata": {}}},
                {
                    "responses_create_params": {"input": [], "metadata": {"instance_id": "demo__calc-1"}},
                    "anyswe": {"agent": "nope"},
                },
                {
                    "responses_create_params": {
                        "input": [],
                        # The row is the declared dataset's, looked up by id (an inline row is not read).
                        "metadata": {
                            "instance_id": "demo__nope-9",
                            "dataset_name": "demo-swebench",
                            "instance_dict": "{not json",
                        },
                    }
                },
            ],
        )
    )
    assert [status for status, _ in answers] == [400, 400, 400]
    assert "metadata.instance_id" in answers[0][1]["error"]
    assert "nope" in answers[1][1]["error"]
    assert "has no instance 'demo__nope-9'" in answers[2][1]["error"]
    assert server.health()["served"] == 0


def test_a_runtime_that_does_not_answer_is_the_servers_fault_not_the_requests(tmp_path: Path, gym_python: Path) -> None:
    """A 503 (try again), not a 400 (the request's own fault), and JSON like every answer."""
    import os

    config = tmp_path / "serve.yaml"
    config.write_text(CONFIG)
    proc, url = started(serve_argv(config), env={**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock"})
    try:
        (row,) = gym_rows(gym_python, ["demo__calc-1"])
        ((status, answer),) = asyncio.run(post(url, [row]))
        assert status == 503 and "RuntimeNotAvailable" in answer["error"] and "docker" in answer["error"], answer
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)


SLOW = {"model": "slow"}


def _wait_for_sandbox(server: Served, deadline: float = 180) -> str:
    run_id = str(server.health()["run_id"])
    end = time.monotonic() + deadline
    while time.monotonic() < end and not sandboxes(run_id):
        time.sleep(0.5)
    assert sandboxes(run_id), "the rollout started no sandbox"
    return run_id


def _gone(run_id: str, deadline: float = 120) -> bool:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if not sandboxes(run_id):
            return True
        time.sleep(0.5)
    return False


def test_past_the_queue_a_request_is_refused_at_once(tmp_path: Path, gym_python: Path) -> None:
    """One rollout at a time and no queue: a second request while one runs is a 503, and nothing of it runs."""
    config = tmp_path / "serve.yaml"
    config.write_text(CONFIG)
    proc, url = started([*serve_argv(config), "--set", "concurrency=1", "--set", "queue=0"])
    served = Served(proc, url)
    (row,) = gym_rows(gym_python, ["demo__calc-1"])

    async def two() -> tuple[int, str]:
        import aiohttp

        async with aiohttp.ClientSession() as session:
            first = asyncio.ensure_future(session.post(url + "/run", json={**row, "anyswe": SLOW}, headers=AUTH))
            await asyncio.to_thread(_wait_for_sandbox, served)
            async with session.post(url + "/run", json=row, headers=AUTH) as resp:
                answer = (resp.status, (await resp.json())["error"])
            first.cancel()
            with pytest.raises(asyncio.CancelledError):
                await first
            return answer

    try:
        status, error = asyncio.run(two())
        assert status == 503 and "busy" in error and "queue 0" in error, error
        assert served.health()["served"] == 0
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)


def test_a_client_that_disconnects_leaves_no_sandbox(server: Served, gym_python: Path) -> None:
    (row,) = gym_rows(gym_python, ["demo__calc-1"])

    async def post_then_leave() -> None:
        import aiohttp

        async with aiohttp.ClientSession() as session:
            request = asyncio.ensure_future(
                session.post(server.url + "/run", json={**row, "anyswe": SLOW}, headers=AUTH)
            )
            await asyncio.to_thread(_wait_for_sandbox, server)
            request.cancel()  # the client goes away mid-agent, its connection closed
            with pytest.raises(asyncio.CancelledError):
                await request

    asyncio.run(post_then_leave())
    run_id = str(server.health()["run_id"])
    assert _gone(run_id), sandboxes(run_id)
    health = server.health()
    assert (health["running"], health["served"]) == (0, 0)


def test_sigterm_stops_the_server_and_removes_every_sandbox(server: Served, gym_python: Path) -> None:
    (row,) = gym_rows(gym_python, ["demo__calc-1"])

    async def post_then_stop() -> tuple[int, str]:
        import aiohttp

        async with aiohttp.ClientSession() as session:
            request = asyncio.ensure_future(
                session.post(server.url + "/run", json={**row, "anyswe": SLOW}, headers=AUTH)
            )
            run_id = await asyncio.to_thread(_wait_for_sandbox, server)
            server.proc.send_signal(signal.SIGTERM)
            code = await asyncio.to_thread(server.proc.wait, 120)
            with pytest.raises(aiohttp.ClientError):
                await request
            return code, run_id

    code, run_id = asyncio.run(post_then_stop())
    assert server.proc.stdout is not None
    assert code == 0 and "every sandbox removed" in server.proc.stdout.read()
    assert sandboxes(run_id) == []  # removed before the server exited, not later


def test_gyms_own_client_runs_a_rollout_through_a_server_whose_config_says_auth_none(
    tmp_path: Path, gym_python: Path
) -> None:
    """NeMo Gym's rollout collection posts /run through its ServerClient with no Authorization header: a
    server whose config says ``auth: none`` answers it (with a warning naming its address at start), and
    the response validates against Gym's own model; a server with the default token refuses the same call."""
    rows = gym_rows(gym_python, ["demo__calc-1"])
    request = tmp_path / "request.json"
    request.write_text(json.dumps(rows[0]))
    for auth in ("none", "token"):
        config = tmp_path / f"serve-{auth}.yaml"
        config.write_text(CONFIG + f"auth: {auth}\n")
        argv = [sys.executable, "-m", "anyswe", "serve", "--config", str(config), "--port", "0"]
        proc, url = started(argv if auth == "none" else serve_argv(config))
        try:
            host, port = url.removeprefix("http://").rsplit(":", 1)
            if auth == "none":
                assert proc.stdout is not None
                warning = proc.stdout.readline()
                assert "warning: auth: none" in warning and f"{host}:{port}" in warning, warning
            client = [str(gym_python), str(GYM / "gym_client.py"), host, port, str(request)]
            # In a directory of its own: Gym's modules write an outputs/ directory where they run.
            r = subprocess.run(client, capture_output=True, text=True, timeout=900, cwd=tmp_path)
            assert r.returncode == 0, r.stderr[-4000:]
            assert json.loads(r.stdout.splitlines()[-1])["status"] == (200 if auth == "none" else 401), r.stdout
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=120)
        if auth == "none":
            response = json.loads(request.with_suffix(".response.json").read_text())
            assert response["reward"] == 1.0 and response["resolved"], response
            (parsed,) = validate(gym_python, [response], tmp_path)
            assert parsed["reward"] == 1.0 and not parsed["mask_sample"]
