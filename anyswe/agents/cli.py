"""Command-line agents that run inside the task's sandbox: Claude Code, OpenClaw, Hermes, Codex, OpenCode,
Pi, Gemini CLI, Cline.

Each is a small subclass saying which bundle it runs from, its command line and environment, and
how its structured output maps onto anyswe's exit reasons. What they share lives here: the sandbox
they need (their bundle read-only, a per-task writable state directory, no network but the model
gateway, relayed to ``127.0.0.1:<port>`` inside), a check that the bundle runs in the task's image
before the agent starts, and the run itself, stopped inside the sandbox before the executor's
deadline so nothing the agent started outlives its phase.
"""

from __future__ import annotations

import dataclasses
import os
from abc import abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import ConfigDict, Field

from anyswe.agents.base import Agent, AgentConfig, AgentContext, AgentOutcome, ExitReason
from anyswe.agents.bundles import BUNDLE_DIR, STATE_DIR, BundleRecipe, ensure_bundle
from anyswe.errors import AgentError
from anyswe.model import Protocol

if TYPE_CHECKING:
    from anyswe.model import ModelEndpoint, ModelSpec
    from anyswe.sandbox import ExecResult, SandboxRequest

#: Where the gateway relay listens inside the sandbox.
GATEWAY_PORT = 8765
#: The environment variable an agent that reads its key from one is given the task's token in.
TOKEN_ENV = "ANYSWE_TASK_TOKEN"
#: How agents say their model's context window is full, in their own words or their API's.
_CONTEXT_FULL = ("context window", "context_length_exceeded", "context length", "prompt is too long")
#: The agent's own deadline comes this much before the executor's, so it is stopped inside.
_GRACE_SECONDS = 10.0


class CliAgentConfig(AgentConfig):
    """What every in-sandbox agent's config has; each agent's own class adds its settings."""

    model_config = ConfigDict(extra="forbid")

    max_turns: int = Field(default=100, ge=1, description="Model turns before the agent is stopped.")
    extra_args: list[str] = Field(default_factory=list, description="More command-line flags for the agent.")
    prompt: str = Field(
        default="{problem_statement}\n\nThe repository is checked out in {workdir}. Fix the issue by editing "
        "the source; do not change the tests.",
        description="The task given to the agent ({problem_statement}, {workdir}).",
    )


class ProtocolChoiceConfig(CliAgentConfig):
    """The config of an agent that can speak more than one protocol (its class's ``speaks``)."""

    protocol: Protocol | None = Field(
        default=None,
        description="What the agent speaks to the gateway (default: the model's own protocol); the gateway "
        "translates to the model's.",
    )


class CliAgent(Agent):
    """An agent that is a program run in the task's sandbox from a bundle, through the model gateway."""

    bundle: ClassVar[BundleRecipe]
    config: CliAgentConfig
    #: The agent's pinned release (its lock's version), which exports name.
    pinned_release: ClassVar[str | None] = None
    #: The agent has no turn limit of its own: the gateway keeps ``max_turns`` for it (a call past it
    #: ends the task at max_iterations).
    turn_cap_at_gateway: ClassVar[bool] = False
    #: For an agent told which protocol to speak (a :class:`ProtocolChoiceConfig`'s ``protocol``, default
    #: the model's): each anyswe protocol it can speak -> its own name for it. Empty: it speaks one.
    speaks: ClassVar[dict[str, str]] = {}

    @classmethod
    def release(cls) -> str | None:
        return cls.pinned_release

    @classmethod
    def gateway_turn_cap(cls, config: AgentConfig) -> int | None:
        return config.max_turns if cls.turn_cap_at_gateway and isinstance(config, CliAgentConfig) else None

    @classmethod
    def check_model(cls, config: AgentConfig, model: ModelSpec) -> None:
        chosen = config.protocol if isinstance(config, ProtocolChoiceConfig) else None
        if cls.speaks and (chosen or model.agent_protocol) not in cls.speaks:  # a plugin's protocol, say
            raise AgentError(
                f"{cls.name} speaks {', '.join(cls.speaks)}, not {chosen or model.agent_protocol!r}; set its "
                "protocol to one of them"
            )

    def spoken(self, ctx: AgentContext) -> tuple[str, str]:
        """For an agent with ``speaks``: (its own name for the protocol it speaks this task, the gateway's
        URL for that protocol: the root for Anthropic's clients, ``/v1`` for OpenAI's)."""
        assert ctx.model is not None
        chosen = self.config.protocol if isinstance(self.config, ProtocolChoiceConfig) else None
        protocol = chosen or ctx.model.api
        return self.speaks[protocol], self.base_url + ("" if protocol == "anthropic-messages" else "/v1")

    def task(self, ctx: AgentContext) -> str:
        """The prompt, filled in for this task."""
        return self.config.prompt.format(problem_statement=ctx.task.problem_statement, workdir=ctx.workdir)

    def turns(self, ctx: AgentContext) -> str:
        return str(self.config.max_turns)

    def prepare(self) -> Path:
        """Build (once) and return the agent's bundle on the host."""
        return ensure_bundle(self.bundle)

    def sandbox_request(
        self, request: SandboxRequest, *, model: ModelEndpoint | None, state_dir: Path
    ) -> SandboxRequest:
        from anyswe.sandbox import Mount
        from anyswe.sandbox.request import Gateway

        if model is None or model.socket is None or model.token is None:
            raise AgentError(f"{self.name} runs in the sandbox and needs the model gateway's socket and a token")
        mounts = (Mount(str(self.prepare()), BUNDLE_DIR), Mount(str(state_dir), STATE_DIR, read_only=False))
        return dataclasses.replace(
            request,
            mounts=(*request.mounts, *mounts),
            network="gateway",
            gateway=Gateway(model.socket, GATEWAY_PORT),
        )

    @property
    def base_url(self) -> str:
        """The gateway as the agent reaches it inside the sandbox."""
        return f"http://127.0.0.1:{GATEWAY_PORT}"

    @abstractmethod
    def command(self, ctx: AgentContext) -> list[str]:
        """The agent's command line (no secret: the token travels in :meth:`configure`)."""

    @abstractmethod
    def configure(self, ctx: AgentContext, token: str) -> dict[str, str]:
        """Write the agent's config files (if any) into the task's state directory; its environment
        (where the gateway is, the task's token unless a config file holds it, its state directories)."""

    @abstractmethod
    def outcome(self, ctx: AgentContext, result: ExecResult, state_dir: Path) -> AgentOutcome:
        """anyswe's outcome from the agent's structured output (not from its exit code alone)."""

    async def preflight(self, ctx: AgentContext) -> None:
        """Stop before starting, with a clear error, if the bundle cannot run in this image."""
        check = [f"{BUNDLE_DIR}/{self.bundle.check[0]}", *self.bundle.check[1:]]
        r = await ctx.sandbox.exec(check, timeout=120, env=self._home_env())
        if r.ok:
            return
        missing = await ctx.sandbox.exec(
            f"ldd {BUNDLE_DIR}/{self.bundle.check[0]} 2>&1 | grep -Ei 'not found|version' | head -5", timeout=60
        )
        raise AgentError(
            f"{self.name} cannot run in image {ctx.sandbox.image}: `{' '.join(check)}` exited {r.exit_code}: "
            f"{(r.stderr or r.stdout).strip()[-600:]}{' | ' + missing.stdout.strip() if missing.stdout.strip() else ''}"
        )

    def _home_env(self) -> dict[str, str]:
        return {"HOME": f"{STATE_DIR}/home"}

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        if ctx.model is None or ctx.model.token is None or ctx.state_dir is None:
            raise AgentError(f"{self.name} needs a model endpoint with a token and a state directory")
        await ctx.sandbox.exec(["mkdir", "-p", f"{STATE_DIR}/home", f"{STATE_DIR}/tmp"], timeout=60)
        await self.preflight(ctx)
        env = {**self._home_env(), **self.configure(ctx, ctx.model.token)}
        timeout = max(ctx.timeout - _GRACE_SECONDS, 1.0)
        result = await ctx.sandbox.exec(self.command(ctx), env=env, workdir=ctx.workdir, timeout=timeout)
        ctx.log(f"{self.name} exited {result.exit_code}{' (timed out)' if result.timed_out else ''}")
        if result.stderr.strip():
            ctx.log(result.stderr.strip()[-4000:])
        outcome = self.outcome(ctx, result, ctx.state_dir)
        if result.timed_out:
            outcome.exit_reason = ExitReason.TIMEOUT
        return outcome


def names_full_context(text: str) -> bool:
    """Whether an agent's error text says the model's context window is full."""
    lower = text.lower()
    return any(phrase in lower for phrase in _CONTEXT_FULL)


def json_lines(text: str) -> list[dict[str, Any]]:
    """The JSON objects of a JSON-lines stream (other lines, such as warnings, skipped)."""
    import json

    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                out.append(value)
    return out


def private_file(path: Path, text: str) -> None:
    """Write a file only its owner may read (an agent's config holding the task's token)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
