"""The CLI agents (pinned releases, from their bundles) where a run goes wrong or
runs somewhere unusual: each agent's turn cap, a dead model endpoint and a budget end in their exit
reasons; bundles built on Debian 12 run on Debian 11 and a missing library stops one agent clearly; a
model in another protocol is reached through the gateway's translation with its key kept on the host.
(The agents resolving tasks on both runtimes: test_cli_agents.py.)"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from clikit import SPEC, experiment

from anyswe.experiment import Experiment
from anyswe.gateway import Gateway, ScriptedModel

pytestmark = pytest.mark.containers

REPO = Path(__file__).resolve().parents[2]


#: agent type -> the protocol it speaks to the gateway.
SPOKEN = {
    "claude-code": "anthropic-messages",
    "openclaw": "openai-chat",
    "hermes": "openai-chat",
    "codex": "openai-responses",
    "opencode": "openai-chat",
    "pi": "openai-chat",
    "gemini-cli": "google-generate-content",
    "cline": "openai-chat",
}
#: Where a model of each protocol is served below its root URL.
SUFFIX = {"anthropic-messages": "", "google-generate-content": "/v1beta"}


@pytest.mark.parametrize("agent", list(SPOKEN))
def test_turn_cap_dead_endpoint_and_budget_end_in_their_exit_reasons(
    runtimes: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, agent: str
) -> None:
    with socket.socket() as s:  # a port on this machine with nothing listening: a dead endpoint
        s.bind(("127.0.0.1", 0))
        dead_port = s.getsockname()[1]
    protocol = SPOKEN[agent]
    base = f"http://127.0.0.1:{dead_port}" + SUFFIX.get(protocol, "/v1")
    exp = experiment(
        tmp_path,
        "dataset.instance_ids=[demo__calc-1]",
        f"agents.capped={{type: {agent}, max_turns: 1}}",
        f"agents.free={{type: {agent}}}",
        f"models.endless={{api: scripted, protocol: {protocol}, misbehave: never_submits}}",
        f"models.dead={{api: {protocol}, model: m, base_url: '{base}', api_key_env: ANYSWE_TEST_DEAD_KEY}}",
        f"models.budgeted={{api: scripted, protocol: {protocol}, budget: {{calls: 1}}}}",
        "matrix.agents=[capped]",
        "matrix.models=[endless]",
        "matrix.providers=[docker]",
        "matrix.include=[{agent: free, model: dead, provider: docker}, "
        "{agent: free, model: budgeted, provider: docker}]",
        # OpenClaw takes 17 s and 23 CPU-seconds to its first model call on an idle machine (node
        # loading its bundle: neither a warm home nor node's compile cache changes that), and over
        # 240 s when CI's workers load the two cores (a cold run building real images): the turn cap
        # must be what stops it, not the timeout.
        "timeouts.agent=600",
        "retries.max_attempts=1",
    )
    monkeypatch.setenv("ANYSWE_TEST_DEAD_KEY", "sk-never-used")
    exp.run(progress=False)
    rows = {r["model"]: r for r in exp.results().iter_rows(named=True)}
    assert rows["endless"]["exit_reason"] == "max_iterations" and not rows["endless"]["resolved"], rows["endless"]
    # A dead model endpoint says nothing about the agent: infra, masked, run again (here: once only).
    dead = rows["dead"]
    assert (dead["error_kind"], dead["mask_sample"], dead["model_calls"]) == ("infra", True, 0), dead
    assert "upstream failed" in dead["error"] and dead["exit_reason"] in ("error", "timeout"), dead
    budgeted = rows["budgeted"]
    # The fix in its one call, then refused: a resolve after a forced stop is masked.
    assert (budgeted["exit_reason"], budgeted["resolved"], budgeted["mask_sample"]) == ("budget", True, True)


def test_an_older_base_runs_every_agent_and_a_missing_library_stops_one_clearly(
    runtimes: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bundles built on Debian 12 run on Debian 11 (glibc 2.31); an image without libstdc++ stops
    OpenClaw, Pi and Gemini CLI (node needs it) before it starts, naming the library, while the others still run."""
    from python_on_whales import docker

    from anyswe.sandbox.store import build_image

    broken = f"anyswe-test/no-libstdcxx:{uuid.uuid4().hex[:8]}"
    (tmp_path / "ctx").mkdir()
    (tmp_path / "ctx" / "Dockerfile").write_text(
        "FROM anyswe/base:bookworm\nRUN rm -f /usr/lib/x86_64-linux-gnu/libstdc++.so.6*\n"
    )
    # anyswe's own build (--force-rm): a failed step leaves no container behind.
    asyncio.run(build_image(tmp_path / "ctx" / "Dockerfile", broken))
    (tmp_path / "spec.yaml").write_text(SPEC)
    everyone = [
        "dataset={name: demo, instance_ids: [demo__calc-1]}",
        "matrix={agents: [claude, openclaw, hermes, codex, opencode, pi, gemini, cline], models: [scripted-chat],"
        " providers: [docker]}",
        "models.scripted-chat={api: scripted, protocol: anthropic-messages}",
    ]
    try:
        for base, run in (("anyswe/base:bullseye", "bullseye"), (broken, "broken")):
            monkeypatch.setenv("ANYSWE_BASE_IMAGE", base)
            exp = Experiment.load(tmp_path / "spec.yaml", overrides=everyone, run_dir=tmp_path / run)
            exp.run(progress=False)
            rows = {r["agent"]: r for r in exp.results().iter_rows(named=True)}
            if run == "bullseye":
                assert all(r["resolved"] for r in rows.values()), rows
            else:
                # Codex is a static binary, OpenCode's and Cline's need only the C library: no libstdc++ is no
                # matter to them.
                assert all(rows[a]["resolved"] for a in ("claude", "hermes", "codex", "opencode", "cline")), rows
                for node_agent in ("openclaw", "pi", "gemini"):  # node needs libstdc++
                    stopped = rows[node_agent]
                    assert stopped["error_kind"] == "agent" and stopped["model_calls"] == 0, stopped
                    assert "cannot run in image" in stopped["error"], stopped["error"]
                    assert "libstdc++" in stopped["error"], stopped["error"]
    finally:
        docker.image.remove(broken, force=True)


@pytest.fixture
def upstream() -> Iterator[tuple[str, str]]:
    """Another model provider on this machine (an anyswe gateway serving the oracle of demo__calc-1 in
    every protocol), with a sentinel key: (base URL, key)."""
    from anyswe.datasets import load_dataset

    # The oracle (the patch in a here-document, then git apply), not the demo's script: that writes the
    # file with `mkdir -p "$(dirname ...)"`, and Gemini CLI's shell tool blocks any command substitution.
    patch = load_dataset("demo-swebench").by_id()["demo__calc-1"].patch
    key = f"sk-anyswe-sentinel-{uuid.uuid4().hex}"
    loop = asyncio.new_event_loop()
    ready: dict[str, str] = {}
    started, stop = threading.Event(), asyncio.Event()

    async def serve() -> None:
        async with Gateway() as gw:
            await gw.start()
            gw.grant("upstream", "model-x", ScriptedModel.oracle(patch, "/testbed"), token=key)
            ready["url"] = gw.url()
            started.set()
            await stop.wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    thread.start()
    assert started.wait(30)
    try:
        yield ready["url"], key
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(30)


#: agent type -> (the protocol it speaks to the gateway, the upstream model's protocol): never the same.
TRANSLATIONS = {
    "claude-code": ("anthropic-messages", "openai-chat"),
    "openclaw": ("openai-chat", "anthropic-messages"),
    # An upstream of Google's protocol, reached through litellm's gemini provider.
    "hermes": ("openai-chat", "google-generate-content"),
    # Codex speaks only the Responses API (its wire_api "chat" is gone): an Anthropic model behind it.
    "codex": ("openai-responses", "anthropic-messages"),
    "opencode": ("openai-chat", "openai-responses"),
    # Pi told to speak Anthropic Messages (its provider's api), to an OpenAI-chat model.
    "pi": ("anthropic-messages", "openai-chat"),
    # Gemini CLI speaks only Google's protocol: a policy server speaking OpenAI chat behind it.
    "gemini-cli": ("google-generate-content", "openai-chat"),
    "cline": ("openai-chat", "anthropic-messages"),
}


def _processes() -> tuple[list[str], list[str]]:
    """The command line of every process, and the environment of every agent process inside a
    container (another mount namespace than this one): where a key must never be."""
    own_ns = os.readlink("/proc/self/ns/mnt")
    cmdlines, environs = [], []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes()
            cmdlines.append(cmdline.decode(errors="replace"))
            if b"/opt/anyswe-agent" in cmdline and os.readlink(proc / "ns" / "mnt") != own_ns:
                environs.append((proc / "environ").read_bytes().decode(errors="replace"))
        except OSError:
            continue
    return cmdlines, environs


@pytest.mark.parametrize("agent", list(TRANSLATIONS))
def test_a_model_in_another_protocol_through_translation_and_its_key_stays_on_the_host(
    runtimes: None, tmp_path: Path, upstream: tuple[str, str], monkeypatch: pytest.MonkeyPatch, agent: str
) -> None:
    """Each agent with a model speaking another protocol than the agent's (Claude Code, which speaks
    only Anthropic Messages, with an OpenAI-protocol model): the gateway translates. The model's key
    is in no process's command line, no agent process's environment and no file of the run."""
    url, key = upstream
    spoken, model_api = TRANSLATIONS[agent]
    monkeypatch.setenv("ANYSWE_TEST_UPSTREAM_KEY", key)
    base = url + SUFFIX.get(model_api, "/v1")
    told = agent in ("openclaw", "pi")  # agents whose protocol is a setting: told to speak another one
    agent_block = f"{{type: {agent}, protocol: {spoken}}}" if told else f"{{type: {agent}}}"
    exp = experiment(
        tmp_path,
        "dataset.instance_ids=[demo__calc-1]",
        f"agents.a={agent_block}",
        f"models.m={{api: {model_api}, model: model-x, base_url: '{base}', api_key_env: ANYSWE_TEST_UPSTREAM_KEY}}",
        "matrix={agents: [a], models: [m], providers: [docker]}",
    )
    cmdlines: list[str] = []
    environs: list[str] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            seen_cmdlines, seen_environs = _processes()
            cmdlines.extend(seen_cmdlines)
            environs.extend(seen_environs)
            done.wait(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        exp.run(progress=False)
    finally:
        done.set()
        watcher.join(10)
    row = exp.results().row(0, named=True)
    assert row["resolved"] and row["exit_reason"] == "submitted", row
    calls = [json.loads(line) for line in (exp.run_dir / row["trajectory_path"]).read_text().splitlines()]
    assert {c["protocol"] for c in calls} == {spoken}  # what the agent spoke; the upstream spoke model_api
    assert any("anyswe-agent/tmp" in env for env in environs), "no agent environment was seen"
    assert key not in "".join(cmdlines) and key not in "".join(environs)
    for path in exp.run_dir.rglob("*"):
        assert not path.is_file() or key.encode() not in path.read_bytes(), path
