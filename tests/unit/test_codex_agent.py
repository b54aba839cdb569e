"""Codex's exit reason and usage come from its own ``--json`` events (the shapes below are what Codex
0.171.0 printed here, against anyswe's gateway), and its config holds no token."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from anyswe.agents.base import AgentContext, ExitReason
from anyswe.agents.codex import CodexAgent, CodexConfig
from anyswe.datasets import load_dataset
from anyswe.model import ModelEndpoint
from anyswe.sandbox.request import ExecResult

STARTED = [
    {"type": "thread.started", "thread_id": "01a248ac-dd95-7743-89bc-d51cc0cf7631"},
    {"type": "turn.started"},
]
COMPLETED = {
    "type": "turn.completed",
    "usage": {"input_tokens": 10585, "cached_input_tokens": 512, "cache_write_input_tokens": 0, "output_tokens": 100},
}


def _context(tmp_path: Path) -> AgentContext:
    task = load_dataset("demo").by_id()["demo__calc-1"].agent_view()
    sandbox: Any = None  # configure() and outcome() touch only the state directory and the exec's result
    model = ModelEndpoint(name="m", api="anthropic-messages", model="model-x", token="tok-sentinel")
    return AgentContext(sandbox=sandbox, task=task, workdir="/testbed", timeout=600, model=model, state_dir=tmp_path)


def _outcome(events: list[dict[str, Any]], tmp_path: Path, prefix: str = "") -> Any:
    stdout = prefix + "".join(json.dumps(e) + "\n" for e in events)
    return CodexAgent(CodexConfig()).outcome(_context(tmp_path), ExecResult(0, stdout, "", 5.0), tmp_path)


def test_a_completed_turn_is_a_submission_with_codexs_usage(tmp_path: Path) -> None:
    outcome = _outcome([*STARTED, COMPLETED], tmp_path, prefix="Reading additional input from stdin...\n")
    assert outcome.exit_reason == ExitReason.SUBMITTED
    usage = outcome.usage
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens) == (10585, 100, 512)
    assert usage.turns == 0  # Codex does not count turns: the gateway's calls stand for them
    assert json.loads(outcome.artifacts["codex.jsonl"].splitlines()[-1]) == COMPLETED


def test_a_failed_turn_is_an_error_or_the_context_window_by_its_message(tmp_path: Path) -> None:
    failed = {"type": "turn.failed", "error": {"message": "unexpected status 401: anyswe budget exhausted"}}
    assert _outcome([*STARTED, failed], tmp_path).exit_reason == ExitReason.ERROR
    full = {
        "type": "turn.failed",
        "error": {"message": "Codex ran out of room in the model's context window. Start a new thread."},
    }
    assert _outcome([*STARTED, full], tmp_path).exit_reason == ExitReason.CONTEXT_WINDOW
    # The message only in an error event before a failed turn without one.
    events = [*STARTED, {"type": "error", "message": "context_length_exceeded"}, {"type": "turn.failed"}]
    assert _outcome(events, tmp_path).exit_reason == ExitReason.CONTEXT_WINDOW


def test_no_turn_event_is_an_error(tmp_path: Path) -> None:
    outcome = _outcome(STARTED, tmp_path)
    assert outcome.exit_reason == ExitReason.ERROR and outcome.info == {}


def test_the_config_points_at_the_gateway_and_the_token_travels_only_in_the_environment(tmp_path: Path) -> None:
    ctx = _context(tmp_path)
    agent = CodexAgent(CodexConfig())
    env = agent.configure(ctx, "tok-sentinel")
    config = (tmp_path / "codex" / "config.toml").read_text()
    assert "tok-sentinel" not in config and env[next(k for k, v in env.items() if v == "tok-sentinel")]
    assert 'base_url = "http://127.0.0.1:8765/v1"' in config and 'wire_api = "responses"' in config
    assert env["CODEX_HOME"] == "/var/lib/anyswe-agent/codex"
    argv = agent.command(ctx)
    assert "tok-sentinel" not in " ".join(argv) and argv[argv.index("--model") + 1] == "model-x"
    assert "--dangerously-bypass-approvals-and-sandbox" in argv and argv[-1].startswith(ctx.task.problem_statement)
