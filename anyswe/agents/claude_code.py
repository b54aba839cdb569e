"""``claude-code``: Anthropic's Claude Code CLI, headless, inside the task's sandbox.

The bundle is the npm package's native binary (no node needed; glibc >= 2.26), pinned in
``locks/claude-code``. It runs ``claude -p TASK --output-format stream-json`` as the image's user,
with ``IS_SANDBOX=1`` (root may skip permission prompts only then), telemetry and update checks
off, its config under the task's state directory, and the gateway as ``ANTHROPIC_BASE_URL`` with
the task's token as its key. Its transcript (the stream-json lines) is kept with the task; the last
line (``type: result``) gives the exit reason and the turns.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field

from anyswe.agents.base import AgentContext, AgentOutcome, AgentUsage, ExitReason
from anyswe.agents.bundles import BUNDLE_DIR, STATE_DIR, BundleRecipe, copy_file, npm_ci
from anyswe.agents.cli import CliAgent, CliAgentConfig, json_lines, names_full_context

if TYPE_CHECKING:
    from anyswe.sandbox import ExecResult

VERSION = "2.1.332"


def _build(lock: Path, work: Path, out: Path) -> None:
    node_modules = npm_ci(lock, work)
    copy_file(node_modules / "@anthropic-ai" / "claude-code-linux-x64" / "claude", out / "bin" / "claude")


BUNDLE = BundleRecipe(name="claude-code", lock="claude-code", build=_build, check=("bin/claude", "--version"))


class ClaudeCodeConfig(CliAgentConfig):
    """The ``agents.<name>`` block of a spec with ``type: claude-code``."""

    type: Literal["claude-code"] = "claude-code"
    max_retries: int = Field(
        default=2,
        ge=0,
        description="Claude Code's own retries of a failed API call (CLAUDE_CODE_MAX_RETRIES; its default, 10, "
        "compounds with the gateway's three and keeps a dead endpoint busy for minutes).",
    )


class ClaudeCodeAgent(CliAgent):
    name: ClassVar[str] = "claude-code"
    config_class = ClaudeCodeConfig
    config: ClaudeCodeConfig
    pinned_release = VERSION
    bundle = BUNDLE
    capture_excludes = (".claude",)
    transcript = "agent-claude-code.jsonl"

    @classmethod
    def tool_results(cls, transcript: str) -> dict[str, tuple[str, bool]]:
        return tool_results(transcript)

    def command(self, ctx: AgentContext) -> list[str]:
        assert ctx.model is not None
        return [
            f"{BUNDLE_DIR}/bin/claude",
            *("-p", self.task(ctx), "--model", ctx.model.model, "--output-format", "stream-json", "--verbose"),
            *("--dangerously-skip-permissions", "--max-turns", self.turns(ctx)),
            *self.config.extra_args,
        ]

    def configure(self, ctx: AgentContext, token: str) -> dict[str, str]:
        assert ctx.model is not None
        return {
            "ANTHROPIC_BASE_URL": self.base_url,
            "ANTHROPIC_API_KEY": token,
            # Side calls (titles, summaries) go to the same model: the gateway grants only that one.
            "ANTHROPIC_SMALL_FAST_MODEL": ctx.model.model,
            "ANTHROPIC_DEFAULT_HAIKU_MODEL": ctx.model.model,
            "IS_SANDBOX": "1",
            "CLAUDE_CODE_MAX_RETRIES": str(self.config.max_retries),
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "CLAUDE_CONFIG_DIR": f"{STATE_DIR}/claude",
            "TMPDIR": f"{STATE_DIR}/tmp",
        }

    def outcome(self, ctx: AgentContext, result: ExecResult, state_dir: Path) -> AgentOutcome:
        events = json_lines(result.stdout)
        final = next((e for e in reversed(events) if e.get("type") == "result"), None)
        transcript = "".join(json.dumps(e) + "\n" for e in events)
        outcome = AgentOutcome(artifacts={"claude-code.jsonl": transcript})
        if final is None:
            ctx.log(f"claude-code ended without a result line (exit {result.exit_code})")
            outcome.exit_reason = ExitReason.ERROR
            return outcome
        outcome.exit_reason = classify(final)
        outcome.usage = _usage(final)
        outcome.info = {k: final.get(k) for k in ("subtype", "terminal_reason", "is_error", "num_turns")}
        if final.get("permission_denials"):
            ctx.log(f"claude-code: tools were denied: {json.dumps(final['permission_denials'])[:1000]}")
        return outcome


def classify(final: dict[str, Any]) -> ExitReason:
    """Claude Code's result line -> anyswe's exit reason."""
    subtype, reason = str(final.get("subtype", "")), str(final.get("terminal_reason", ""))
    if subtype == "error_max_turns" or reason == "max_turns":
        return ExitReason.MAX_ITERATIONS
    text = str(final.get("result", "")).lower()
    if final.get("is_error") or subtype.startswith("error") or reason not in ("", "completed"):
        return ExitReason.CONTEXT_WINDOW if names_full_context(text) else ExitReason.ERROR
    return ExitReason.SUBMITTED


def _usage(final: dict[str, Any]) -> AgentUsage:
    usage = final.get("usage") or {}
    return AgentUsage(
        turns=int(final.get("num_turns") or 0),
        input_tokens=int(usage.get("input_tokens") or 0),
        output_tokens=int(usage.get("output_tokens") or 0),
        cache_read_tokens=int(usage.get("cache_read_input_tokens") or 0),
        cache_write_tokens=int(usage.get("cache_creation_input_tokens") or 0),
    )


def tool_results(transcript: str) -> dict[str, tuple[str, bool]]:
    """Tool use id -> (its result's text, is_error), from Claude Code's stream-json transcript (its
    ``user`` events' ``tool_result`` blocks)."""
    out: dict[str, tuple[str, bool]] = {}
    for event in json_lines(transcript):
        message = event.get("message") if event.get("type") == "user" else None
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict) or block.get("type") != "tool_result" or not block.get("tool_use_id"):
                continue
            body = block.get("content")
            if isinstance(body, list):
                body = "".join(p.get("text", "") for p in body if isinstance(p, dict))
            out[str(block["tool_use_id"])] = (str(body or ""), bool(block.get("is_error")))
    return out
