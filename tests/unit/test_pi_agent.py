"""Pi's exit reason and usage come from its own ``--mode json`` events (the message shapes below are
what Pi 0.73.1 printed here, against anyswe's gateway), and its config files hold no token."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from anyswe.agents.base import AgentContext, ExitReason
from anyswe.agents.pi import PiAgent, PiConfig
from anyswe.datasets import load_dataset
from anyswe.model import ModelEndpoint
from anyswe.sandbox.request import ExecResult

USAGE = {"input": 754, "output": 10, "cacheRead": 3, "cacheWrite": 0, "totalTokens": 764}


def _reply(stop: str, error: str | None = None, usage: dict[str, int] = USAGE) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": "assistant",
        "content": [{"type": "text", "text": "I have made the change and I am done."}],
        "api": "openai-completions",
        "provider": "anyswe",
        "usage": usage,
        "stopReason": stop,
    }
    if error is not None:
        message["errorMessage"] = error
    return {"type": "message_end", "message": message}


START = [{"type": "session", "version": 3, "cwd": "/testbed"}, {"type": "agent_start"}, {"type": "turn_start"}]
USER = {"type": "message_end", "message": {"role": "user", "content": [{"type": "text", "text": "fix it"}]}}
END = {"type": "agent_end", "messages": []}


def _context(tmp_path: Path, api: str = "openai-chat") -> AgentContext:
    task = load_dataset("demo").by_id()["demo__calc-1"].agent_view()
    sandbox: Any = None  # configure() and outcome() touch only the state directory and the exec's result
    model = ModelEndpoint(name="m", api=api, model="model-x", token="tok-sentinel")
    return AgentContext(sandbox=sandbox, task=task, workdir="/testbed", timeout=600, model=model, state_dir=tmp_path)


def _outcome(events: list[dict[str, Any]], tmp_path: Path) -> Any:
    stdout = "".join(json.dumps(e) + "\n" for e in events)
    return PiAgent(PiConfig()).outcome(_context(tmp_path), ExecResult(0, stdout, "", 5.0), tmp_path)


def test_a_reply_that_stops_of_itself_is_a_submission_with_pis_usage(tmp_path: Path) -> None:
    tool_use = _reply("toolUse", usage={"input": 651, "output": 90, "cacheRead": 0, "cacheWrite": 0})
    streamed = {"type": "message_update", "message": {"role": "assistant"}, "assistantMessageEvent": {}}
    outcome = _outcome([*START, USER, streamed, tool_use, _reply("stop"), END], tmp_path)
    assert outcome.exit_reason == ExitReason.SUBMITTED
    usage = outcome.usage
    assert (usage.turns, usage.input_tokens, usage.output_tokens, usage.cache_read_tokens) == (2, 1405, 100, 3)
    kept = [json.loads(line)["type"] for line in outcome.artifacts["pi.jsonl"].splitlines()]
    assert "message_update" not in kept and kept[-1] == "agent_end"  # the stream's repeats are not kept


def test_an_error_an_abort_or_no_end_is_an_error_and_a_full_window_is_the_context_window(tmp_path: Path) -> None:
    assert _outcome([*START, _reply("error", "401 anyswe budget exhausted"), END], tmp_path).exit_reason == (
        ExitReason.ERROR
    )
    assert _outcome([*START, _reply("aborted"), END], tmp_path).exit_reason == ExitReason.ERROR
    assert _outcome([*START, _reply("length"), END], tmp_path).exit_reason == ExitReason.ERROR
    assert _outcome([*START, _reply("stop")], tmp_path).exit_reason == ExitReason.ERROR  # killed before its end
    full = _reply("error", "400 This model's maximum context length is 8192 tokens (context_length_exceeded)")
    assert _outcome([*START, full, END], tmp_path).exit_reason == ExitReason.CONTEXT_WINDOW
    assert _outcome(START, tmp_path).exit_reason == ExitReason.ERROR


def test_the_config_names_the_tokens_variable_and_turns_pis_retries_off(tmp_path: Path) -> None:
    ctx = _context(tmp_path, api="anthropic-messages")
    agent = PiAgent(PiConfig())
    env = agent.configure(ctx, "tok-sentinel")
    models = json.loads((tmp_path / "pi" / "models.json").read_text())
    provider = models["providers"]["anyswe"]
    assert "tok-sentinel" not in json.dumps(models) and env[provider["apiKey"]] == "tok-sentinel"
    assert provider["api"] == "anthropic-messages" and provider["baseUrl"] == "http://127.0.0.1:8765"
    assert provider["models"] == [{"id": "model-x", "name": "model"}]
    settings = json.loads((tmp_path / "pi" / "settings.json").read_text())
    assert settings["retry"] == {"enabled": False, "provider": {"maxRetries": 0}}
    assert env["PI_CODING_AGENT_DIR"] == "/var/lib/anyswe-agent/pi" and env["PI_OFFLINE"] == "1"
    argv = agent.command(ctx)
    assert "tok-sentinel" not in " ".join(argv) and argv[argv.index("--provider") + 1] == "anyswe"
    assert "--no-session" in argv and argv[-1].startswith(ctx.task.problem_statement)
