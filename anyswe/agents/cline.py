"""``cline``: Cline CLI (``cline --json``), headless, inside the task's sandbox.

The bundle is the ``cline`` package's native linux-x64 package (npm ``@cline/cli-linux-x64``, a
Bun-compiled binary with its extensions beside it; glibc >= 2.17, no node), pinned in
``locks/cline``. Cline reads its provider from ``<data dir>/settings/providers.json`` (what ``cline
auth`` writes): here an ``openai-compatible`` provider at the gateway (OpenAI chat completions; the
gateway translates to the model's protocol), with the task's token, written 0600 into the task's
state directory and removed when the agent ends (Cline reads its key only from that file or its
``--key`` flag, and a flag would put the token on a command line). Its config and data directories
are there too. It runs in act mode with every tool approved (the task's sandbox is the boundary) and
no turn limit of its own, so the gateway keeps ``max_turns``. Its ``--json`` events (JSON lines:
``agent_event``, ``hook_event``, a final ``run_result`` with the finish reason and usage) are the
transcript.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from anyswe._files import remove_task_file
from anyswe.agents.base import AgentContext, AgentOutcome, AgentUsage, ExitReason
from anyswe.agents.bundles import BUNDLE_DIR, STATE_DIR, BundleError, BundleRecipe, npm_ci
from anyswe.agents.cli import CliAgent, CliAgentConfig, json_lines, names_full_context, private_file

if TYPE_CHECKING:
    from anyswe.sandbox import ExecResult

VERSION = "3.0.65"
#: Cline's finish reason -> anyswe's exit reason.
_FINISH = {
    "completed": ExitReason.SUBMITTED,
    "max_iterations": ExitReason.MAX_ITERATIONS,
    "mistake_limit": ExitReason.ERROR,
    "aborted": ExitReason.ERROR,
    "error": ExitReason.ERROR,
}


def _build(lock: Path, work: Path, out: Path) -> None:
    package = npm_ci(lock, work) / "@cline" / "cli-linux-x64"
    if not (package / "bin" / "cline").is_file():
        raise BundleError("bundle layout: @cline/cli-linux-x64 has no bin/cline")
    for part in ("bin", "extensions", "cline-hub"):  # the binary finds its extensions beside it
        if (package / part).is_dir():
            shutil.copytree(package / part, out / part, symlinks=True)


BUNDLE = BundleRecipe(name="cline", lock="cline", build=_build, check=("bin/cline", "--version"))


class ClineConfig(CliAgentConfig):
    """The ``agents.<name>`` block of a spec with ``type: cline``."""

    type: Literal["cline"] = "cline"


class ClineAgent(CliAgent):
    name: ClassVar[str] = "cline"
    config_class = ClineConfig
    config: ClineConfig
    pinned_release = VERSION
    turn_cap_at_gateway = True
    bundle = BUNDLE
    transcript = "agent-cline.jsonl"
    capture_excludes = (".cline", ".clinerules")

    def command(self, ctx: AgentContext) -> list[str]:
        return [
            f"{BUNDLE_DIR}/bin/cline",
            *("--json", "--auto-approve", "true", "--cwd", ctx.workdir),
            *("--config", f"{STATE_DIR}/cline", "--data-dir", f"{STATE_DIR}/cline/data"),
            *self.config.extra_args,
            self.task(ctx),
        ]

    def configure(self, ctx: AgentContext, token: str) -> dict[str, str]:
        assert ctx.model is not None and ctx.state_dir is not None
        # What `cline auth --provider openai-compatible` writes (every field: without `updatedAt` Cline
        # 3.0.65 drops the entry silently and falls back to its own hosted provider).
        settings = {
            "provider": "openai-compatible",
            "apiKey": token,
            "model": ctx.model.model,
            "baseUrl": f"{self.base_url}/v1",
        }
        entry = {"settings": settings, "updatedAt": "2026-01-01T00:00:00.000Z", "tokenSource": "manual"}
        providers = {
            "version": 1,
            "lastUsedProvider": "openai-compatible",
            "modes": {},
            "providers": {"openai-compatible": entry},
        }
        where = ctx.state_dir / "cline" / "data" / "settings"
        where.mkdir(parents=True, exist_ok=True)
        private_file(where / "providers.json", json.dumps(providers, indent=1))
        (ctx.state_dir / "cline" / "home").mkdir(exist_ok=True)
        return {"HOME": f"{STATE_DIR}/cline/home", "TMPDIR": f"{STATE_DIR}/tmp"}

    def outcome(self, ctx: AgentContext, result: ExecResult, state_dir: Path) -> AgentOutcome:
        remove_task_file(state_dir, "cline/data/settings/providers.json")  # the token goes with the task
        events = json_lines(result.stdout)
        # Streamed text repeats itself piece by piece: the transcript keeps the rest.
        kept = [e for e in events if (e.get("event") or {}).get("type") != "content_start"]
        outcome = AgentOutcome(artifacts={"cline.jsonl": "".join(json.dumps(e) + "\n" for e in kept)})
        final = next((e for e in reversed(events) if e.get("type") == "run_result"), None)
        outcome.exit_reason = classify(final)
        if outcome.exit_reason != ExitReason.SUBMITTED:
            ctx.log(f"cline ended with {(final or {}).get('finishReason', 'no run_result')} (exit {result.exit_code})")
        usage: dict[str, Any] = (final or {}).get("aggregateUsage") or (final or {}).get("usage") or {}
        outcome.usage = AgentUsage(
            turns=int((final or {}).get("iterations") or 0),
            input_tokens=int(usage.get("inputTokens") or 0),
            output_tokens=int(usage.get("outputTokens") or 0),
            cache_read_tokens=int(usage.get("cacheReadTokens") or 0),
            cache_write_tokens=int(usage.get("cacheWriteTokens") or 0),
        )
        error = str((final or {}).get("error") or "")[:500]
        outcome.info = {"finish": (final or {}).get("finishReason"), "error": error}
        return outcome


def classify(final: dict[str, Any] | None) -> ExitReason:
    """Cline's ``run_result`` -> anyswe's exit reason (its finish reason; an error naming the context
    window is that)."""
    if final is None:
        return ExitReason.ERROR
    text = json.dumps(final.get("error") or final.get("text") or "")
    if final.get("finishReason") == "error" and names_full_context(text):
        return ExitReason.CONTEXT_WINDOW
    return _FINISH.get(str(final.get("finishReason")), ExitReason.ERROR)
