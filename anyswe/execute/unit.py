"""The unit of work: everything one task needs to run on any machine, in one picklable value.

The driver turns each pending task of a plan into a :class:`WorkUnit`; whoever runs it (the local
executor here, a distributed executor elsewhere) builds providers, agents, images and harnesses
from it on its own side and returns a :class:`TaskOutput`. Only the driver writes the run
directory. A unit holds no secret: a model's key stays in the environment variable its spec names.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from anyswe._proc import MAX_PATCH_BYTES
from anyswe.errors import AnysweError
from anyswe.images.resolve import ImageSource

if TYPE_CHECKING:
    from anyswe.agents import AgentConfig
    from anyswe.datasets import Instance
    from anyswe.execute.outcome import Outcome
    from anyswe.model import ModelEndpoint, ModelSpec
    from anyswe.plan import Cell, Plan, Task
    from anyswe.results.schema import Failure, TamperPolicy, TaskResult
    from anyswe.sandbox import ProviderConfig


@dataclass(frozen=True)
class ReplaySource:
    """The recorded trajectory a replay model serves, or why the replayed run has none (then that
    task, and only it, fails with the agent's error)."""

    trajectory: Path | None = None
    error: str | None = None
    #: The trajectory is ATIF another tool wrote (served in order), not an anyswe run's.
    atif: bool = False


@dataclass(frozen=True)
class WorkUnit:
    """One attempt at one task, self-contained."""

    key: str
    cell: Cell
    sample: int
    attempt: int
    spec_name: str
    run_id: str
    instance: Instance
    agent: AgentConfig
    model: ModelSpec | None
    #: The provider's config, with the spec's timeouts.sandbox_start filled in where the user set none.
    provider: ProviderConfig
    image: ImageSource
    harness: str
    agent_timeout: float
    grading_timeout: float
    #: Where the repository is in the task's image (the harness's workdir).
    workdir: str = "/testbed"
    #: The command that ends the agent's work, for a scripted model's last reply (the agent's own).
    submit_command: str | None = None
    #: The turns the gateway allows (an agent that cannot cap its own turns; None: no cap).
    gateway_turns: int | None = None
    #: A replay model's recorded trajectory, chosen when the unit is built.
    replay: ReplaySource | None = None
    #: The gateway endpoint and per-task token, filled in by the driver when the task starts.
    endpoint: ModelEndpoint | None = None
    #: A bigger patch is the agent's failure (spec limits.max_patch_bytes).
    max_patch_bytes: int = MAX_PATCH_BYTES
    #: What a sample flagged runner_tamper or status_conflict earns (spec grading.tampered).
    tamper_policy: TamperPolicy = "zero"


@dataclass(frozen=True)
class TaskOutput:
    """What running a unit gives back: its outcome (the row is written from it) and its artefacts
    (file name -> text)."""

    outcome: Outcome
    artifacts: dict[str, str] = field(default_factory=dict)

    @functools.cached_property
    def result(self) -> TaskResult:
        """The results row of the outcome (written once per output: the outcome does not change)."""
        return self.outcome.row()

    def failed(self, failure: Failure) -> TaskOutput:
        """This output with ``failure`` appended to its outcome (a later stage's finding)."""
        return dataclasses.replace(self, outcome=self.outcome.failed(failure))


def _provider_config(plan: Plan, name: str) -> ProviderConfig:
    cfg = plan.spec.providers[name]
    # A value the user set is honoured; only an unset startup timeout takes the spec-wide one.
    if "startup_timeout" not in cfg.model_fields_set:
        cfg = cfg.model_copy(update={"startup_timeout": plan.spec.timeouts.sandbox_start})
    return cfg


def make_unit(plan: Plan, task: Task, *, run_id: str, attempt: int) -> WorkUnit:
    """The unit of work for one task of ``plan``: everything its stages need, resolved here."""
    from anyswe.agents import agent_class
    from anyswe.grading import get_harness

    spec = plan.spec
    provider = _provider_config(plan, task.cell.provider)
    instance = plan.instance(task.instance_id)
    agent = spec.agents[task.cell.agent]
    model = spec.models[task.cell.model] if task.cell.model else None
    agent_cls = agent_class(agent.type)
    return WorkUnit(
        key=task.key,
        cell=task.cell,
        sample=task.sample,
        attempt=attempt,
        spec_name=spec.name,
        run_id=run_id,
        instance=instance,
        agent=agent,
        model=model,
        provider=provider,
        image=ImageSource.choose(plan.dataset, provider).of(instance),
        harness=task.harness,
        agent_timeout=spec.timeouts.agent,
        grading_timeout=spec.timeouts.grading,
        max_patch_bytes=spec.limits.max_patch_bytes,
        tamper_policy=spec.grading.tampered,
        workdir=get_harness(task.harness).workdir,
        submit_command=agent_cls.submit_command,
        gateway_turns=agent_cls.gateway_turn_cap(agent),
        replay=replay_source(model, task.cell, instance.instance_id, task.sample),
    )


def replay_source(model: ModelSpec | None, cell: Cell, instance_id: str, sample: int) -> ReplaySource | None:
    """The trajectory of the same agent, instance and sample in the run ``model`` replays (the
    reference backend's when several ran it); None for a model that replays nothing."""
    if model is None or model.replay is None:
        return None
    if model.replay.atif is not None:
        return _atif_source(model.replay.atif, instance_id, sample)
    from anyswe.sandbox import provider_rank

    assert model.replay.run is not None
    run, recorded_model = model.replay.run, model.replay.model or cell.model
    wanted = (cell.agent, recorded_model, instance_id, sample)
    try:
        recorded = _recorded(run / "results.jsonl")
    except (AnysweError, OSError) as exc:  # that task's error, as a missing run's is: the others still run
        return ReplaySource(error=f"replay: {run / 'results.jsonl'} cannot be read: {exc}")
    candidates = [
        r
        for r in recorded
        if (r.agent, r.model, r.instance_id, r.sample) == wanted
        and (model.replay.provider is None or r.provider == model.replay.provider)
        and r.trajectory_path
    ]
    if not candidates:
        return ReplaySource(
            error=f"replay: {run} has no recorded calls of {cell.agent} x {recorded_model} on "
            f"{instance_id} (sample {sample})"
        )
    chosen = min(candidates, key=lambda r: (provider_rank(r.provider_type), r.provider))
    return ReplaySource(trajectory=run / str(chosen.trajectory_path))


def _atif_source(directory: Path, instance_id: str, sample: int) -> ReplaySource:
    """An instance's ATIF trajectory in ``directory``: ``<instance_id>.json``, else the ``sample``-th of
    Harbor's trials (``<instance_id>__*/agent/trajectory.json``) or of anyswe's export (``<key>.json``,
    the key ending in ``__<instance_id>``)."""
    exact = directory / f"{instance_id}.json"
    if sample == 0 and exact.is_file():
        return ReplaySource(trajectory=exact, atif=True)
    found = sorted(directory.glob(f"{instance_id}__*/agent/trajectory.json"))
    found = found or sorted(directory.glob(f"*__{instance_id}.json"))
    if len(found) <= sample:
        return ReplaySource(error=f"replay: {directory} has no ATIF trajectory of {instance_id} (sample {sample})")
    return ReplaySource(trajectory=found[sample], atif=True)


def _recorded(results: Path) -> list[TaskResult]:
    """The latest attempts of a replayed run, read once per file version (every unit of a run asks)."""
    try:
        stat = results.stat()
    except OSError:
        return []
    return _read_recorded(str(results), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _read_recorded(path: str, size: int, mtime_ns: int) -> list[TaskResult]:
    from anyswe.results.store import latest_attempts, read_results

    return list(latest_attempts(read_results(Path(path))))
