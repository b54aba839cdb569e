"""One task as one RL sample: ``anyswe.rollout()`` and :class:`Rollouts`, a session of many.

A rollout runs exactly the path a run's task runs (``Session.attempt``: the model's grant, the
task's phases in a sandbox, grading in a fresh one, the grant's usage folded in, every verdict,
reward and mask decided by ``execute/decide.py``), without a spec file or a run directory. What a
trainer needs comes back typed in a :class:`Rollout`; a run directory is written only when asked
(``run_dir=``), in the same layout ``anyswe apply`` writes, so ``anyswe results`` reads it.

A session keeps one worker (providers with their concurrency bounds, agents, images built once)
and one model gateway for all its rollouts, which is what ``anyswe serve`` runs on; leaving it
removes every sandbox it started.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import ValidationError

from anyswe.errors import SpecError, first_problem
from anyswe.execute.sample import Rollout
from anyswe.sandbox.slots import SharedBound

if TYPE_CHECKING:
    from types import TracebackType

    from anyswe.agents import AgentConfig
    from anyswe.datasets import Dataset, Instance
    from anyswe.execute.runner import Runner
    from anyswe.execute.unit import WorkUnit
    from anyswe.model import ModelSpec
    from anyswe.sandbox import ProviderConfig


class Rollouts:
    """A session of rollouts: one worker, one model gateway and one sweep for all of them.

    ``async with Rollouts() as session: await session.rollout(row, agent=..., model=...)``.
    ``concurrency`` bounds the rollouts in flight (the rest wait in turn); ``run_dir`` records each.
    """

    def __init__(
        self,
        *,
        concurrency: int | None = None,
        run_dir: str | Path | None = None,
        executor: str = "local",
        address: str | None = None,
        gateway_host: str | None = None,
    ) -> None:
        from anyswe.execute.runner import make_runner
        from anyswe.execute.session import Session
        from anyswe.sandbox import provider_names

        self.run_id = uuid.uuid4().hex[:12]
        #: What runs each unit: a worker here, or (``executor="ray"``) the Ray cluster at ``address``
        #: (without one, a Ray started here advertising ``concurrency`` of each provider type), whose
        #: nodes reach this session's gateway at ``gateway_host`` (default: found as `apply` finds it).
        local = {kind: float(concurrency or os.cpu_count() or 1) for kind in provider_names()}
        self.session = Session(make_runner(executor, address, local, gateway_host), run_id=self.run_id)
        self.run_dir = Path(run_dir) if run_dir is not None else None
        # A rollout's provider bound first, then the session's; on Ray the cluster's resources bound
        # each provider type.
        bounded = self.session.runner.bounded_by_driver
        self._slots = SharedBound(concurrency, per_provider=bounded) if concurrency else None
        self._checked: set[str] = set()
        self._samples: dict[str, int] = {}
        #: Datasets an instance id was looked up in, loaded once: a server's every request names one, and
        #: loading Verified's 500 rows again took 120-250 ms of CPU per request (measured).
        self._datasets: dict[str, Dataset] = {}

    @property
    def runner(self) -> Runner:
        return self.session.runner

    async def __aenter__(self) -> Rollouts:
        if self.run_dir is not None:
            from anyswe.results.store import RunStore

            self.session.store = RunStore(self.run_dir).__enter__()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.shield(self.close())

    async def close(self) -> None:
        """Remove every sandbox this session started and stop its gateway."""
        try:
            await self.session.close()
        finally:
            if self.session.store is not None:
                self.session.store.__exit__(None, None, None)
                self.session.store = None

    def next_sample(self, instance_id: str) -> int:
        """A sample index of ``instance_id`` not yet used in this session (nor in its run directory):
        repeated rollouts of an instance (Gym's repeats, a server's requests) are samples of their own,
        with their own task keys, rows and trajectories."""
        if instance_id not in self._samples:
            rows = self.session.store.results() if self.session.store is not None else []
            self._samples[instance_id] = 1 + max((r.sample for r in rows if r.instance_id == instance_id), default=-1)
        sample = self._samples[instance_id]
        self._samples[instance_id] = sample + 1
        return sample

    def unit(
        self,
        instance: Instance | Mapping[str, Any] | str,
        *,
        agent: AgentConfig | Mapping[str, Any],
        model: ModelSpec | Mapping[str, Any] | None = None,
        provider: ProviderConfig | Mapping[str, Any] | str | None = None,
        dataset: str | Dataset | None = None,
        harness: str | None = None,
        timeouts: Mapping[str, float] | None = None,
        max_patch_bytes: int | None = None,
        sample: int | Literal["next"] = 0,
    ) -> WorkUnit:
        """The unit of work a rollout runs: a one-task plan of these blocks, as a spec would give.
        ``sample="next"``: the instance's next sample (:meth:`next_sample`), taken once the blocks are
        valid, so a refused request takes no sample number."""
        from anyswe.execute.blocks import config_block, model_block
        from anyswe.execute.grade import dataset_and_instance
        from anyswe.execute.unit import make_unit
        from anyswe.plan import make_plan, task_key
        from anyswe.sandbox import default_provider
        from anyswe.spec import Spec, agent_config_class, provider_config_class

        if isinstance(instance, str) and isinstance(dataset, str):  # an id is looked up in its dataset's rows
            dataset = self._loaded(dataset)
        ds, row = dataset_and_instance(instance, dataset, "rollout")
        if provider is None or isinstance(provider, str):  # None: the reference backend
            provider = {"type": provider or default_provider()}
        agent_cfg = config_block(agent, agent_config_class, "agent")
        provider_cfg = config_block(provider, provider_config_class, "provider")
        model_spec = model_block(model)
        fields: dict[str, Any] = {
            "name": "rollout",
            "dataset": {"name": ds.name or "rows", "instance_ids": [row.instance_id]},
            "agents": {agent_cfg.type: agent_cfg},
            "models": {"model": model_spec} if model_spec is not None else {},
            "providers": {provider_cfg.type: provider_cfg},
            "samples": 1,
            "timeouts": dict(timeouts or {}),
            "grading": {"harness": harness} if harness else {},
        }
        if max_patch_bytes is not None:
            fields["limits"] = {"max_patch_bytes": max_patch_bytes}
        try:
            spec = Spec.model_validate(fields)
        except ValidationError as exc:
            raise SpecError(f"rollout: {first_problem(exc)}") from None
        plan = make_plan(spec, ds)  # a row's dataset holds just it; an id's, the whole dataset
        # The plan's one task, as sample ``sample`` (a plan of sample+1 tasks would grow with every
        # rollout of an instance a server is asked for).
        (first,) = plan.tasks
        if sample == "next":
            sample = self.next_sample(first.instance_id)
        key = task_key(spec, first.cell, plan.instance(first.instance_id), sample, plan.harness_name)
        task = dataclasses.replace(first, sample=sample, key=key)
        store = self.session.store
        attempt = 1 if store is None else store.attempts().get(task.key, 0) + 1
        return make_unit(plan, task, run_id=self.run_id, attempt=attempt)

    def _loaded(self, name: str) -> Dataset:
        from anyswe.datasets import load_dataset

        if name not in self._datasets:
            self._datasets[name] = load_dataset(name)
        return self._datasets[name]

    async def rollout(self, instance: Instance | Mapping[str, Any] | str, **blocks: Any) -> Rollout:
        """Run one rollout (the blocks as :meth:`unit` takes them); never raises for the task's own
        failure, which is in the rollout (a bad block raises :class:`~anyswe.errors.SpecError`)."""
        unit = self.unit(instance, **blocks)
        if self._slots is None:
            return await self.run(unit)
        # By name and config, as the worker makes its providers: rollouts may name cells alike.
        key = f"{unit.cell.provider} {unit.provider.model_dump_json()}"
        async with self._slots.place(key, unit.provider.concurrency):
            return await self.run(unit)

    async def group(
        self, instance: Instance | Mapping[str, Any] | str, n: int, *, mask_together: bool = True, **blocks: Any
    ) -> list[Rollout]:
        """``n`` rollouts of one instance (samples 0..n-1, run at once within the session's bound). With
        ``mask_together`` a group with a masked rollout is masked whole (decide.mask_group)."""
        from anyswe.execute.decide import mask_group

        rollouts = await asyncio.gather(*(self.rollout(instance, sample=i, **blocks) for i in range(n)))
        if not mask_together:
            return list(rollouts)
        results = mask_group([r.result for r in rollouts])
        return [r.model_copy(update={"result": res}) for r, res in zip(rollouts, results, strict=True)]

    async def run(self, unit: WorkUnit) -> Rollout:
        """Run ``unit`` through the run's own path (the session's attempt) and read back its trajectory."""
        from anyswe.execute.models import TRAJECTORY
        from anyswe.gateway.trajectory import read_trajectory
        from anyswe.results.schema import Failure

        runtime = unit.provider.model_dump_json()
        if runtime not in self._checked:  # a runtime (or a cluster) that answered once is not asked again
            await self.runner.check([unit])
            self._checked.add(runtime)
        with self.session.task_dir(unit) as task_dir:
            output = await self.session.attempt(unit, task_dir)
            trajectory_file = task_dir / TRAJECTORY
            if output.result.trajectory_path:  # kept apart under the attempt's own name on an infra error
                trajectory_file = task_dir / Path(output.result.trajectory_path).name
            lost: list[str] = []  # each line (or the file) that cannot be read: file:line: why
            steps = (
                read_trajectory(trajectory_file, output.artifacts, problems=lost) if trajectory_file.is_file() else []
            )
            if lost and output.result.error_kind is None:
                # A sample whose calls cannot all be read back is one the gateway did not record whole:
                # the gateway's own failure to record (models.settle's ``unrecorded``), never the agent's.
                error = f"the trajectory could not be read whole: {'; '.join(lost[:3])}"
                output = output.failed(Failure(kind="infra", source="trajectory", message=error))
            output = await self.session.record(output)
        return Rollout.of(output, steps, self.run_dir, lost)


async def rollout_async(
    instance: Instance | Mapping[str, Any] | str, *, run_dir: str | Path | None = None, **blocks: Any
) -> Rollout:
    """Run one task as one RL sample and return its :class:`Rollout`.

    ``instance``: a row (an :class:`~anyswe.datasets.Instance` or a mapping) or an instance id of
    ``dataset``. ``agent`` and ``provider`` are blocks as in a spec (a mapping with ``type``, or a
    config; a provider may be just its type name), ``model`` a model block (any upstream, an
    OpenAI-compatible policy server included; None for agents without one). ``dataset`` names the
    harness and the images (a row of a dataset swebench knows runs in its official image),
    ``timeouts`` takes ``agent``, ``grading`` and ``sandbox_start`` seconds. ``run_dir``: record it
    there as ``anyswe apply`` would.
    """
    async with Rollouts(run_dir=run_dir) as session:
        return await session.rollout(instance, **blocks)


def rollout(instance: Instance | Mapping[str, Any] | str, **options: Any) -> Rollout:
    """:func:`rollout_async` from synchronous code (a script, or a Jupyter cell whose loop is running)."""
    from anyswe._sync import run_sync

    return run_sync(rollout_async(instance, **options))
