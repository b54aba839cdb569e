"""``noop``: changes nothing. It must resolve no task (the grader's other sanity check)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import ConfigDict

from anyswe.agents.base import Agent, AgentConfig, AgentContext, AgentOutcome


class NoopConfig(AgentConfig):
    model_config = ConfigDict(extra="forbid")

    type: Literal["noop"] = "noop"


class NoopAgent(Agent):
    name: ClassVar[str] = "noop"
    config_class = NoopConfig
    needs_model = False

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        ctx.log("noop: leaving the repository as it is")
        return AgentOutcome()
