"""``opencode``: OpenCode (``opencode run``), headless, inside the task's sandbox.

The bundle is the npm package's native binary (Bun-compiled, no node; glibc >= 2.17), pinned in
``locks/opencode``. OpenCode reaches the gateway through its bundled ``@ai-sdk/openai-compatible``
provider (OpenAI chat completions; the gateway translates to the model's protocol), configured by a
per-task ``opencode.json`` in the task's state directory whose key is ``{env:...}``: the token
stays in the environment. Its data, config, cache and snapshots live under XDG directories there
too. It runs with ``--auto`` (every permission granted: the task's sandbox is the boundary), its
downloads (models catalogue, LSP servers, updates, plugins) and the repository's own OpenCode config
off, and no turn limit of its own, so the gateway keeps ``max_turns``. Its ``--format json`` events
(JSON lines: ``step_start``, ``tool_use``, ``text``, ``step_finish`` with the finish reason and
tokens, ``error``) are kept as the task's transcript.
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

VERSION = "1.18.33"
#: OpenCode's switches for what a sealed sandbox cannot do or should not let the repository decide.
_QUIET = (
    "OPENCODE_DISABLE_AUTOUPDATE",
    "OPENCODE_DISABLE_MODELS_FETCH",
    "OPENCODE_DISABLE_LSP_DOWNLOAD",
    "OPENCODE_DISABLE_SHARE",
    "OPENCODE_DISABLE_DEFAULT_PLUGINS",
    "OPENCODE_DISABLE_PROJECT_CONFIG",
)


def _build(lock: Path, work: Path, out: Path) -> None:
    copy_file(npm_ci(lock, work) / "opencode-linux-x64" / "bin" / "opencode", out / "bin" / "opencode")


BUNDLE = BundleRecipe(name="opencode", lock="opencode", build=_build, check=("bin/opencode", "--version"))


class OpenCodeConfig(CliAgentConfig):
    """The ``agents.<name>`` block of a spec with ``type: opencode``."""

    type: Literal["opencode"] = "opencode"


class OpenCodeAgent(CliAgent):
    name: ClassVar[str] = "opencode"
    config_class = OpenCodeConfig
    config: OpenCodeConfig
    pinned_release = VERSION
    turn_cap_at_gateway = True
    bundle = BUNDLE
    transcript = "agent-opencode.jsonl"

    def command(self, ctx: AgentContext) -> list[str]:
        return [
            f"{BUNDLE_DIR}/bin/opencode",
            *("run", "--format", "json", "--auto", "--model", "anyswe/model", "--dir", ctx.workdir),
            # A title of its own: else OpenCode first asks the model for one, a call (and a turn) spent.
            *("--title", ctx.task.instance_id),
            *self.config.extra_args,
            self.task(ctx),
        ]

    def configure(self, ctx: AgentContext, token: str) -> dict[str, str]:
        assert ctx.model is not None and ctx.state_dir is not None
        provider = {
            "npm": "@ai-sdk/openai-compatible",
            "name": "anyswe",
            "options": {"baseURL": f"{self.base_url}/v1", "apiKey": f"{{env:{TOKEN_ENV}}}"},
            "models": {"model": {"id": ctx.model.model, "name": ctx.model.model}},
        }
        config = {"provider": {"anyswe": provider}, "model": "anyswe/model", "autoupdate": False, "share": "disabled"}
        (ctx.state_dir / "opencode.json").write_text(json.dumps(config, indent=1))
        xdg = {f"XDG_{kind.upper()}_HOME": f"{STATE_DIR}/{kind}" for kind in ("config", "data", "cache", "state")}
        return {
            **xdg,
            **dict.fromkeys(_QUIET, "1"),
            "OPENCODE_CONFIG": f"{STATE_DIR}/opencode.json",
            TOKEN_ENV: token,
            "TMPDIR": f"{STATE_DIR}/tmp",
        }

    def outcome(self, ctx: AgentContext, result: ExecResult, state_dir: Path) -> AgentOutcome:
        events = json_lines(result.stdout)
        outcome = AgentOutcome(artifacts={"opencode.jsonl": "".join(json.dumps(e) + "\n" for e in events)})
        finishes = [e.get("part") or {} for e in events if e.get("type") == "step_finish"]
        errors = [_error_text(e) for e in events if e.get("type") == "error"]
        outcome.exit_reason = classify(finishes, errors)
        if outcome.exit_reason != ExitReason.SUBMITTED:
            ctx.log(f"opencode ended with {errors[-1:] or 'no final step'} (exit {result.exit_code})")
        tokens = [f.get("tokens") or {} for f in finishes]
        outcome.usage = AgentUsage(
            turns=len(finishes),
            input_tokens=sum(int(t.get("input") or 0) for t in tokens),
            output_tokens=sum(int(t.get("output") or 0) for t in tokens),
            cache_read_tokens=sum(int((t.get("cache") or {}).get("read") or 0) for t in tokens),
            cache_write_tokens=sum(int((t.get("cache") or {}).get("write") or 0) for t in tokens),
        )
        outcome.info = {"finish": finishes[-1].get("reason") if finishes else None, "error": (errors or [""])[-1][:500]}
        return outcome


def classify(finishes: list[dict[str, Any]], errors: list[str]) -> ExitReason:
    """OpenCode's last step and its errors -> anyswe's exit reason: done when its last step finished
    with ``stop`` and nothing failed."""
    if names_full_context(" ".join(errors)):
        return ExitReason.CONTEXT_WINDOW
    if errors or not finishes or finishes[-1].get("reason") != "stop":
        return ExitReason.ERROR
    return ExitReason.SUBMITTED


def _error_text(event: dict[str, Any]) -> str:
    error = event.get("error")
    if isinstance(error, dict):
        data = error.get("data")
        message = data.get("message") if isinstance(data, dict) else None
        return str(message or error.get("message") or error.get("name") or json.dumps(error)[:500])
    return str(error or event.get("message") or "")
