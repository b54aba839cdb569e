"""An agent for benchmarks: it waits inside its sandbox (as an agent waits on its model) and changes
nothing. Used by type ``bench.sleep_agent:SleepAgent`` from specs the benchmarks write."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import ConfigDict, Field

from anyswe.agents.base import Agent, AgentConfig, AgentContext, AgentOutcome


class SleepConfig(AgentConfig):
    model_config = ConfigDict(extra="forbid")

    type: Literal["bench.sleep_agent:SleepAgent"] = "bench.sleep_agent:SleepAgent"
    seconds: float = Field(default=5.0, ge=0)


class SleepAgent(Agent):
    name: ClassVar[str] = "sleep"
    config_class = SleepConfig
    needs_model = False

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        seconds = getattr(self.config, "seconds", 5.0)
        if seconds:
            await ctx.sandbox.exec(["sleep", str(seconds)], timeout=seconds + 60)
        return AgentOutcome()
