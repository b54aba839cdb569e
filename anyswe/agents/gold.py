"""``gold``: applies the reference patch. The grader's sanity check: it must resolve every task."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import ConfigDict

from anyswe.agents.base import Agent, AgentConfig, AgentContext, AgentOutcome, ExitReason


class GoldConfig(AgentConfig):
    model_config = ConfigDict(extra="forbid")

    type: Literal["gold"] = "gold"


class GoldAgent(Agent):
    name: ClassVar[str] = "gold"
    config_class = GoldConfig
    needs_model = False
    needs_reference = True

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        if not ctx.reference_patch:
            ctx.log("no reference patch for this instance")
            return AgentOutcome(exit_reason=ExitReason.ERROR)
        # Apply it in the work tree, so the executor's git capture is exercised like any agent's.
        await ctx.sandbox.write_file("/tmp/anyswe-gold.diff", ctx.reference_patch.encode())
        r = await ctx.sandbox.exec(["git", "apply", "--verbose", "/tmp/anyswe-gold.diff"], workdir=ctx.workdir)
        await ctx.sandbox.exec(["rm", "-f", "/tmp/anyswe-gold.diff"])
        ctx.log(f"git apply (exit {r.exit_code})\n{r.stdout}{r.stderr}")
        return AgentOutcome(exit_reason=ExitReason.SUBMITTED if r.ok else ExitReason.ERROR)
