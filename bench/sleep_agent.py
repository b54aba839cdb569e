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


class CallingSleepConfig(SleepConfig):
    type: Literal["bench.sleep_agent:CallingSleepAgent"] = "bench.sleep_agent:CallingSleepAgent"  # type: ignore[assignment]
    calls: int = Field(default=1, ge=0)


class CallingSleepAgent(SleepAgent):
    """The sleeping agent that also asks its model ``calls`` times from the host (as a host-driven agent
    does, through its task's gateway grant), ignoring the answers: the gateway's side of a rollout
    (a grant, a socket, a trajectory) with next to no work of its own."""

    name: ClassVar[str] = "calling-sleep"
    config_class = CallingSleepConfig  # type: ignore[assignment]
    needs_model = True

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        import aiohttp

        model = ctx.model
        assert model is not None and model.base_url is not None
        body = {"model": model.model, "messages": [{"role": "user", "content": ctx.task.problem_statement}]}
        headers = {"Authorization": f"Bearer {model.token}"}
        async with aiohttp.ClientSession() as session:
            for _ in range(getattr(self.config, "calls", 1)):
                async with session.post(model.base_url + "/v1/chat/completions", json=body, headers=headers) as r:
                    assert r.status == 200, await r.text()
        return await super().run(ctx)
