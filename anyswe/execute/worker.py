"""The worker side: objects built from units of work, shared by every unit one process runs.

A provider object per (provider name, config) keeps one concurrency bound for all its sandboxes;
an agent object per (agent, model) cell; one image resolver, so each image is built once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from anyswe.agents import agent_class
from anyswe.images.resolve import ImageResolver
from anyswe.sandbox import provider_class

if TYPE_CHECKING:
    from anyswe.agents import Agent
    from anyswe.execute.unit import TaskOutput, WorkUnit
    from anyswe.sandbox import SandboxProvider


class Worker:
    """Builds and caches what units need: providers, agents, images."""

    def __init__(self) -> None:
        self._providers: dict[tuple[str, str], SandboxProvider[Any]] = {}
        self._agents: dict[tuple[str, str | None], Agent] = {}
        self.images = ImageResolver()

    def provider(self, unit: WorkUnit) -> SandboxProvider[Any]:
        key = (unit.cell.provider, unit.provider.model_dump_json())
        if key not in self._providers:
            self._providers[key] = provider_class(unit.provider.type)(unit.provider)
        return self._providers[key]

    def agent(self, unit: WorkUnit) -> Agent:
        key = (unit.cell.agent, unit.cell.model)
        if key not in self._agents:
            self._agents[key] = agent_class(unit.agent.type)(unit.agent, unit.model)
        return self._agents[key]

    async def check(self, units: Iterable[WorkUnit]) -> None:
        """Raise :class:`RuntimeNotAvailable` unless every runtime the units need answers."""
        providers = {id(p): p for p in (self.provider(u) for u in units)}
        await asyncio.gather(*(p.check() for p in providers.values()))

    async def run(self, unit: WorkUnit) -> TaskOutput:
        from anyswe.execute.task import run_task

        return await run_task(unit, self)


def run_unit(unit: WorkUnit) -> TaskOutput:
    """Run one unit in this process with a fresh worker (what a remote node does with a unit it receives)."""
    from anyswe._sync import run_sync

    async def go() -> TaskOutput:
        worker = Worker()
        await worker.check([unit])
        return await worker.run(unit)

    return run_sync(go())
