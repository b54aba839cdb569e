"""OpenClaw's start-up: its config turns off what a one-turn task in a fresh state has no use for, and
carries the task's token nowhere but the 0600 config."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from anyswe.agents.base import AgentContext
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
