"""``example-shell``: an agent that runs fixed shell commands in the repository, per instance.

A model-free agent, like anyswe's ``gold``: it shows what an agent plugin is made of (a pydantic
config of its own, a plan-time check, the run in the task's sandbox), not how to solve a task.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import ClassVar, Literal

from pydantic import ConfigDict, Field

from anyswe.agents import Agent, AgentConfig, AgentContext, AgentOutcome, ExitReason
from anyswe.errors import AgentError


class ShellConfig(AgentConfig):
    model_config = ConfigDict(extra="forbid")

    type: Literal["example-shell"] = "example-shell"
    commands: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Instance id (or '*' for any other) -> shell commands run in order in the repository.",
    )
    #: Seconds per command (the task's own agent timeout still bounds the whole run).
    command_timeout: float = Field(default=60, gt=0)


class ShellAgent(Agent):
    name: ClassVar[str] = "example-shell"
    config_class = ShellConfig
    needs_model = False

    def check(self, dataset_ids: Collection[str] = ()) -> None:
        # At plan time, before any sandbox starts: a command list for an id the dataset does not have
        # is a typo in the spec.
        config = self._config()
        unknown = sorted(set(config.commands) - {"*"} - set(dataset_ids)) if dataset_ids else []
        if unknown:
            raise AgentError(f"example-shell: commands for instances not in the dataset: {', '.join(unknown)}")

    def _config(self) -> ShellConfig:
        assert isinstance(self.config, ShellConfig)
        return self.config

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        config = self._config()
        commands = config.commands.get(ctx.task.instance_id, config.commands.get("*", []))
        for command in commands:
            r = await ctx.sandbox.exec(["bash", "-c", command], workdir=ctx.workdir, timeout=config.command_timeout)
            ctx.log(f"$ {command}\n(exit {r.exit_code})\n{r.stdout}{r.stderr}")
            if not r.ok:
                return AgentOutcome(exit_reason=ExitReason.ERROR)
        return AgentOutcome(exit_reason=ExitReason.SUBMITTED)
