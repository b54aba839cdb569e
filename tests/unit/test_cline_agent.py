"""Cline's exit reason and usage come from its own ``--json`` events (the ``run_result`` shape below is
what Cline 3.0.65 printed here, against anyswe's gateway); its provider file is the one ``cline auth``
writes, private, and gone with the task; the scripted oracle speaks its ``run_commands`` tool."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from anyswe.agents.base import AgentContext, ExitReason
from anyswe.agents.cline import ClineAgent, ClineConfig
from anyswe.datasets import load_dataset
from anyswe.gateway import ScriptedModel
from anyswe.gateway.wire import Conversation, Message
from anyswe.model import ModelEndpoint
from anyswe.sandbox.request import ExecResult

USAGE = {"inputTokens": 2460, "outputTokens": 101, "cacheReadTokens": 7, "cacheWriteTokens": 0, "totalCost": 0}


def _result(finish: str, **extra: Any) -> dict[str, Any]:
    return {"type": "run_result", "finishReason": finish, "iterations": 2, "aggregateUsage": USAGE, **extra}


def _context(tmp_path: Path) -> AgentContext:
    task = load_dataset("demo").by_id()["demo__calc-1"].agent_view()
    sandbox: Any = None  # configure() and outcome() touch only the state directory and the exec's result
    model = ModelEndpoint(name="m", api="openai-chat", model="model-x", token="tok-sentinel")
    return AgentContext(sandbox=sandbox, task=task, workdir="/testbed", timeout=600, model=model, state_dir=tmp_path)


def _outcome(events: list[dict[str, Any]], tmp_path: Path) -> Any:
    stdout = "".join(json.dumps(e) + "\n" for e in events)
    return ClineAgent(ClineConfig()).outcome(_context(tmp_path), ExecResult(0, stdout, "", 5.0), tmp_path)


def test_a_completed_run_is_a_submission_with_clines_usage(tmp_path: Path) -> None:
    streamed = {"type": "agent_event", "event": {"type": "content_start", "text": "Next"}}
    outcome = _outcome(
        [{"type": "hook_event", "hookEventName": "agent_start"}, streamed, _result("completed")], tmp_path
    )
    assert outcome.exit_reason == ExitReason.SUBMITTED
    usage = outcome.usage
    assert (usage.turns, usage.input_tokens, usage.output_tokens, usage.cache_read_tokens) == (2, 2460, 101, 7)
    assert "content_start" not in outcome.artifacts["cline.jsonl"]  # the stream's pieces are not kept


def test_each_finish_reason_has_its_exit_reason(tmp_path: Path) -> None:
    assert _outcome([_result("max_iterations")], tmp_path).exit_reason == ExitReason.MAX_ITERATIONS
    for finish in ("error", "aborted", "mistake_limit", "something-new"):
        assert _outcome([_result(finish)], tmp_path).exit_reason == ExitReason.ERROR
    full = _result("error", text="400 context_length_exceeded: the prompt is too long")
    assert _outcome([full], tmp_path).exit_reason == ExitReason.CONTEXT_WINDOW
    assert _outcome([], tmp_path).exit_reason == ExitReason.ERROR  # no run_result: it did not end of itself


def test_the_provider_file_is_clines_own_private_and_removed_with_the_task(tmp_path: Path) -> None:
    ctx = _context(tmp_path)
    agent = ClineAgent(ClineConfig())
    env = agent.configure(ctx, "tok-sentinel")
    path = tmp_path / "cline" / "data" / "settings" / "providers.json"
    assert path.stat().st_mode & 0o777 == 0o600 and "tok-sentinel" not in json.dumps(env)
    provider = json.loads(path.read_text())["providers"]["openai-compatible"]
    assert provider["settings"] == {
        "provider": "openai-compatible",
        "apiKey": "tok-sentinel",
        "model": "model-x",
        "baseUrl": "http://127.0.0.1:8765/v1",
    }
    argv = agent.command(ctx)
    assert (
        "tok-sentinel" not in " ".join(argv) and "--key" not in argv and argv[-1].startswith(ctx.task.problem_statement)
    )
    agent.outcome(ctx, ExecResult(0, json.dumps(_result("completed")), "", 1.0), tmp_path)
    assert not path.exists()


def test_the_oracle_calls_run_commands_with_a_list_of_one() -> None:
    schema = {"type": "object", "properties": {"commands": {"type": "array", "items": {"type": "string"}}}}
    conv = Conversation("m", [Message("user", "fix it")], tools={"run_commands": schema})
    reply = ScriptedModel(["ls /testbed"]).reply(conv)
    assert not hasattr(reply, "__await__")
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [("run_commands", {"commands": ["ls /testbed"]})]  # type: ignore[union-attr]
