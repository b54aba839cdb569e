"""OpenClaw's start-up: its config turns off what a one-turn task in a fresh state has no use for, its
environment points node at the compile cache made at build (read-only, any user the sandbox runs as),
the bundle's node flags are plain words in a shell wrapper, and the build's warm-up model answers as
OpenClaw asks. None of it carries the task's token anywhere but the 0600 config."""

from __future__ import annotations

import http.client
import json
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from anyswe.agents import openclaw
from anyswe.agents.base import AgentContext
from anyswe.agents.bundles import BUNDLE_DIR, BundleError, node_bundle, share_compile_cache
from anyswe.agents.openclaw import OpenClawAgent, OpenClawConfig
from anyswe.datasets import load_dataset
from anyswe.model import ModelEndpoint


def _context(tmp_path: Path) -> AgentContext:
    task = load_dataset("demo").by_id()["demo__calc-1"].agent_view()
    sandbox: Any = None  # configure() touches only the state directory
    model = ModelEndpoint(name="m", api="openai-chat", model="model-x", token="tok-sentinel")
    return AgentContext(sandbox=sandbox, task=task, workdir="/testbed", timeout=600, model=model, state_dir=tmp_path)


def test_the_config_keeps_the_token_private_and_turns_off_what_a_fresh_state_has_no_use_for(tmp_path: Path) -> None:
    env = OpenClawAgent(OpenClawConfig()).configure(_context(tmp_path), "tok-sentinel")
    path = tmp_path / "openclaw.json5"
    config = json.loads(path.read_text())
    assert path.stat().st_mode & 0o777 == 0o600
    assert config["models"]["providers"]["anyswe"]["apiKey"] == "tok-sentinel"
    assert config["session"]["maintenance"] == {"mode": "warn"}
    assert config["memory"]["search"] == {"rememberAcrossConversations": False}
    assert "tok-sentinel" not in json.dumps(env)
    assert env["NODE_COMPILE_CACHE"] == f"{BUNDLE_DIR}/compile-cache" and env["NODE_COMPILE_CACHE_PORTABLE"] == "1"
    # Without it, OpenClaw's launcher starts a second node to move the cache to a directory of its own.
    assert env["OPENCLAW_PACKAGED_COMPILE_CACHE_RESPAWNED"] == "1"


def test_the_bundles_node_flags_are_plain_words_checked_before_anything_is_installed(tmp_path: Path) -> None:
    for bad in ("--x;rm -rf /", "--x $(id)", "-x", "--x=`id`"):
        with pytest.raises(BundleError, match="plain --flag"):
            node_bundle(tmp_path, tmp_path, tmp_path, "n", "e.js", node_args=(bad,))
    assert not (tmp_path / "package.json").exists()  # npm never ran


def test_a_compile_cache_made_at_build_is_readable_by_all_and_answers_for_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    own = tmp_path / "v24.16.0-x64-cf738c9d-1000"
    own.mkdir()
    (own / "00a1b2c3").write_bytes(b"code")
    (own / "00a1b2c3").chmod(0o600)
    monkeypatch.setattr("os.getuid", lambda: 1000)
    share_compile_cache(tmp_path)
    assert (own / "00a1b2c3").stat().st_mode & 0o777 == 0o644
    alias = tmp_path / "v24.16.0-x64-cf738c9d-0"
    assert alias.is_symlink() and str(alias.readlink()) == own.name  # relative: it holds in the sandbox's mount
    share_compile_cache(tmp_path)  # again: nothing to redo


def _ask(port: int, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("POST", "/v1/chat/completions", json.dumps({"stream": True, "messages": messages}))
    text = conn.getresponse().read().decode()
    conn.close()
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]


def test_the_warm_up_model_asks_for_one_shell_step_then_answers() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), openclaw._WarmModel)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        first = _ask(port, [{"role": "user", "content": "go"}])
        call = first[0]["choices"][0]["delta"]["tool_calls"][0]["function"]
        assert (call["name"], json.loads(call["arguments"])) == ("exec", {"command": "true"})
        assert first[-1]["choices"][0]["finish_reason"] == "tool_calls"
        last = _ask(port, [{"role": "user", "content": "go"}, {"role": "tool", "content": ""}])
        assert last[0]["choices"][0]["delta"]["content"] == "done" and last[-1]["choices"][0]["finish_reason"] == "stop"
    finally:
        server.shutdown()
        server.server_close()
