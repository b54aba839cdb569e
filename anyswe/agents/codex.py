"""``codex``: OpenAI's Codex CLI (``codex exec``), headless, inside the task's sandbox.

The bundle is the npm package's native binary (a static musl executable: it runs in any x86-64
image, whatever its C library) and the ripgrep it ships, pinned in ``locks/codex``, laid out as the
package lays them out so Codex finds its ``rg``. Codex speaks the OpenAI Responses API only (its
``wire_api = "responses"``); the gateway translates to the model's own protocol. It reads a per-task
``config.toml`` under ``CODEX_HOME`` in the task's state directory (a provider pointed at the
gateway; the task's token comes from the environment variable the provider names, so no file holds
it), runs without its own sandbox or approvals (the task's sandbox is the boundary) and has no turn
limit of its own, so the gateway keeps ``max_turns`` (a call past it ends the task at
``max_iterations``). Its ``--json`` events (JSON lines) end with ``turn.completed`` (with usage) or
``turn.failed``; they are kept as the task's transcript.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from anyswe.agents.base import AgentContext, AgentOutcome, AgentUsage, ExitReason
from anyswe.agents.bundles import BUNDLE_DIR, STATE_DIR, BundleRecipe, copy_file, npm_ci
from anyswe.agents.cli import TOKEN_ENV, CliAgent, CliAgentConfig, json_lines, names_full_context

if TYPE_CHECKING:
    from anyswe.sandbox import ExecResult

VERSION = "0.171.0"
_TRIPLE = "x86_64-unknown-linux-musl"
#: The binary inside the bundle, where the npm package puts it (Codex finds ``codex-path/rg`` beside it).
_BIN = f"vendor/{_TRIPLE}/bin/codex"
#: The environment variable Codex's provider reads its key from (the task's token).


def _build(lock: Path, work: Path, out: Path) -> None:
    vendor = npm_ci(lock, work) / "@openai" / "codex-linux-x64" / "vendor" / _TRIPLE
    # Only the agent and its rg: the package's voice host, code-mode host and bubblewrap are for
    # features a headless run in anyswe's sandbox does not use (300 MB less to mount per task).
    copy_file(vendor / "bin" / "codex", out / _BIN)
    copy_file(vendor / "codex-path" / "rg", out / "vendor" / _TRIPLE / "codex-path" / "rg")


BUNDLE = BundleRecipe(name="codex", lock="codex", build=_build, check=(_BIN, "--version"))


class CodexConfig(CliAgentConfig):
    """The ``agents.<name>`` block of a spec with ``type: codex``."""

    type: Literal["codex"] = "codex"


class CodexAgent(CliAgent):
    name: ClassVar[str] = "codex"
    config_class = CodexConfig
    config: CodexConfig
    pinned_release = VERSION
    turn_cap_at_gateway = True
    bundle = BUNDLE
    transcript = "agent-codex.jsonl"

    def command(self, ctx: AgentContext) -> list[str]:
        assert ctx.model is not None
        return [
            f"{BUNDLE_DIR}/{_BIN}",
            *("exec", "--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox"),
            *("--cd", ctx.workdir, "--model", ctx.model.model),
            *self.config.extra_args,
            self.task(ctx),
        ]

    def configure(self, ctx: AgentContext, token: str) -> dict[str, str]:
        assert ctx.model is not None and ctx.state_dir is not None
        home = ctx.state_dir / "codex"
        home.mkdir(exist_ok=True)
        # TOML by hand: three strings, each written with json.dumps (TOML's basic strings are JSON's).
        provider = {
            "name": "anyswe",
            "base_url": f"{self.base_url}/v1",
            "env_key": TOKEN_ENV,
            "wire_api": "responses",
            # The gateway retries its upstream itself; Codex's own retries would multiply them.
            "request_max_retries": 0,
            "stream_max_retries": 0,
        }
        lines = [
            f"model = {json.dumps(ctx.model.model)}",
            'model_provider = "anyswe"',
            "check_for_update_on_startup = false",
            "[model_providers.anyswe]",
            *(f"{k} = {json.dumps(v)}" for k, v in provider.items()),
        ]
        (home / "config.toml").write_text("\n".join(lines) + "\n")
        return {"CODEX_HOME": f"{STATE_DIR}/codex", TOKEN_ENV: token, "TMPDIR": f"{STATE_DIR}/tmp"}

    def outcome(self, ctx: AgentContext, result: ExecResult, state_dir: Path) -> AgentOutcome:
        events = json_lines(result.stdout)
        outcome = AgentOutcome(artifacts={"codex.jsonl": "".join(json.dumps(e) + "\n" for e in events)})
        final = next((e for e in reversed(events) if e.get("type") in ("turn.completed", "turn.failed")), None)
        if final is None:
            ctx.log(f"codex ended without turn.completed or turn.failed (exit {result.exit_code})")
            outcome.exit_reason = ExitReason.ERROR
            return outcome
        outcome.exit_reason = classify(final, events)
        usage = final.get("usage") or {}
        outcome.usage = AgentUsage(
            input_tokens=int(usage.get("input_tokens") or 0),
            output_tokens=int(usage.get("output_tokens") or 0),
            cache_read_tokens=int(usage.get("cached_input_tokens") or 0),
            cache_write_tokens=int(usage.get("cache_write_input_tokens") or 0),
        )
        error = _error_text(final, events)
        if error:
            ctx.log(f"codex: {error[:2000]}")
        outcome.info = {"final": final.get("type"), "error": error[:500]}
        return outcome


def classify(final: dict[str, Any], events: list[dict[str, Any]]) -> ExitReason:
    """Codex's last turn event -> anyswe's exit reason."""
    if final.get("type") == "turn.completed":
        return ExitReason.SUBMITTED
    if names_full_context(_error_text(final, events)):
        return ExitReason.CONTEXT_WINDOW
    return ExitReason.ERROR


def _error_text(final: dict[str, Any], events: list[dict[str, Any]]) -> str:
    """What Codex said went wrong: the failed turn's error, else the last ``error`` event's message."""
    error = final.get("error")
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"])
    if final.get("type") == "turn.completed":
        return ""
    last = next((e for e in reversed(events) if e.get("type") == "error"), None)
    return str(last.get("message") or "") if last else ""
