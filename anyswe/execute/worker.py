"""The worker side: objects built from units of work, shared by every unit one process runs.

A provider object per (provider name, config) keeps one concurrency bound for all its sandboxes;
an agent object per (agent config, model); one image resolver, so each image is built once. A unit
runs with these handed to it (:class:`~anyswe.execute.task.TaskTools`): the task never asks the worker.
"""

from __future__ import annotations

import asyncio
import dataclasses
import traceback
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from anyswe.agents import agent_class
from anyswe.config import cache_dir
from anyswe.errors import RuntimeNotAvailable, SandboxError
from anyswe.execute.classify import failed_output
from anyswe.execute.runner import Runner
from anyswe.execute.seal import SealedImages
from anyswe.execute.task import TaskTools, run_task
from anyswe.grading import get_harness
from anyswe.images.resolve import ImageResolver
from anyswe.sandbox import provider_class
from anyswe.sandbox.labels import LABEL_OWNER, LABEL_RUN, LABEL_TASK, current_owner, owner_alive

if TYPE_CHECKING:
    from anyswe.agents import Agent
    from anyswe.execute.unit import TaskOutput, WorkUnit
    from anyswe.sandbox import SandboxProvider


class Worker(Runner):
    """The ``local`` executor: builds and caches what units need (providers, agents, images) and runs them
    in this process."""

    #: Units run here, next to the gateway: no relay.
    gateway_host: str | None = None

    def __init__(self) -> None:
        self._providers: dict[tuple[str, str], SandboxProvider[Any]] = {}
        self._agents: dict[tuple[str, str], Agent] = {}
        self.images = ImageResolver()
        self.seals = SealedImages(cache_dir() / "seals")

    def provider(self, unit: WorkUnit) -> SandboxProvider[Any]:
        key = (unit.cell.provider, unit.provider.model_dump_json())
        if key not in self._providers:
            self._providers[key] = provider_class(unit.provider.type)(unit.provider)
        return self._providers[key]

    def agent(self, unit: WorkUnit) -> Agent:
        # By content, not by cell name: rollouts name every cell of an agent type alike, whatever its config.
        key = (unit.agent.model_dump_json(), unit.model.model_dump_json() if unit.model is not None else "")
        if key not in self._agents:
            self._agents[key] = agent_class(unit.agent.type)(unit.agent, unit.model)
        return self._agents[key]

    async def check(self, units: Iterable[WorkUnit]) -> None:
        """Raise :class:`RuntimeNotAvailable` unless every runtime the units need answers."""
        providers = {id(p): p for p in (self.provider(u) for u in units)}
        await asyncio.gather(*(p.check() for p in providers.values()))

    def tools(self, unit: WorkUnit) -> TaskTools:
        """What ``unit`` runs with: this worker's provider and agent for it, its harness, images and seals."""
        return TaskTools(self.provider(unit), self.agent(unit), get_harness(unit.harness), self.images, self.seals)

    async def run(self, unit: WorkUnit) -> TaskOutput:
        try:
            tools = self.tools(unit)
        except Exception:  # a plugin's constructor failing is this task's bug, never the run's
            return failed_output(unit, "internal", traceback.format_exc())
        endpoint = unit.endpoint
        if endpoint is None or endpoint.relay is None:
            return await run_task(unit, tools)
        # The gateway is on the driver's machine: this unit's calls go through a relay here.
        from anyswe.gateway.relay import Relay
        from anyswe.results.schema import Failure

        relay = Relay(endpoint.relay)
        try:
            await relay.reachable()
        except RuntimeNotAvailable as exc:
            return failed_output(unit, "infra", str(exc), source="relay")
        async with relay:
            output = await run_task(dataclasses.replace(unit, endpoint=relay.endpoint(endpoint)), tools)
        result = output.result
        if relay.failures and not result.resolved and result.error_kind in (None, "agent"):
            # Calls that never reached the model say nothing about the agent: an infra error, run again.
            error = f"{relay.failures} model calls could not reach the gateway at {endpoint.relay}: "
            error += relay.last_failure
            output = output.failed(Failure(kind="infra", source="relay", message=error))
        return output

    async def collect_orphans(self, task_keys: set[str]) -> list[str]:
        """Remove sandboxes of these tasks whose owner died (an earlier apply killed with -9); their names."""
        return await self._remove_where(
            lambda labels: labels.get(LABEL_TASK) in task_keys and not owner_alive(labels.get(LABEL_OWNER))
        )

    async def close(self) -> None:
        """Nothing to release: sandboxes are removed by their tasks and by ``sweep``."""

    async def collect_orphans_of_run(self, run_id: str) -> list[str]:
        """Remove sandboxes of ``run_id`` whose owner died (a remote worker process killed with its node)."""
        return await self._remove_where(
            lambda labels: labels.get(LABEL_RUN) == run_id and not owner_alive(labels.get(LABEL_OWNER))
        )

    async def sweep(self, run_id: str) -> list[str]:
        """Remove what is left of this process's sandboxes of ``run_id``; their names.

        Every task stops its own sandbox, but an interrupt can land while a runtime is still creating
        one (the daemon finishes a ``docker run`` its killed client gave up on), after the task's
        own removal: the last step of a run collects those.
        """
        owner = current_owner()
        return await self._remove_where(
            lambda labels: labels.get(LABEL_RUN) == run_id and labels.get(LABEL_OWNER) == owner
        )

    async def _remove_where(self, match: Callable[[dict[str, str]], bool]) -> list[str]:
        # Removals still under way in the background are waited for first: they are not leftovers.
        await asyncio.gather(*(p.drain() for p in self._providers.values()))
        removed: list[str] = []
        failed: list[SandboxError] = []
        for provider in self._providers.values():
            try:
                found = await provider.sandboxes()
            except Exception:  # a runtime that stopped answering: `anyswe gc` collects its leftovers later
                continue
            for name, labels in found.items():
                if labels and match(labels):
                    try:
                        await provider.remove(name)
                    except SandboxError as e:  # the others are still removed; this one is named below
                        failed.append(e)
                    else:
                        removed.append(name)
        if failed:
            details = "\n".join(str(e) for e in failed)
            raise SandboxError(f"{len(failed)} sandbox(es) not removed (`anyswe gc` removes them later):\n{details}")
        return removed


def run_unit(unit: WorkUnit) -> TaskOutput:
    """Run one unit in this process with a fresh worker (what a remote node does with a unit it receives)."""
    from anyswe._sync import run_sync

    async def go() -> TaskOutput:
        worker = Worker()
        try:
            await worker.check([unit])
            return await worker.run(unit)
        finally:
            await asyncio.shield(worker.sweep(unit.run_id))

    return run_sync(go())
