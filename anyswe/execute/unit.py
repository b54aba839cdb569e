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
from typing import TYPE_CHECKING

from anyswe._proc import MAX_PATCH_BYTES
from anyswe.images.resolve import ImageSource

if TYPE_CHECKING:
    from anyswe.agents import AgentConfig
    from anyswe.datasets import Instance
    from anyswe.execute.outcome import Outcome
    from anyswe.model import ModelEndpoint, ModelSpec
    from anyswe.plan import Cell, Plan, Task
    from anyswe.results.schema import Failure, TaskResult
    from anyswe.sandbox import ProviderConfig


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
    #: The gateway endpoint and per-task token, filled in by the driver when the task starts.
    endpoint: ModelEndpoint | None = None
    #: A bigger patch is the agent's failure (spec limits.max_patch_bytes).
    max_patch_bytes: int = MAX_PATCH_BYTES


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
    """The unit of work for one task of ``plan``."""
    spec = plan.spec
    provider = _provider_config(plan, task.cell.provider)
    return WorkUnit(
        key=task.key,
        cell=task.cell,
        sample=task.sample,
        attempt=attempt,
        spec_name=spec.name,
        run_id=run_id,
        instance=plan.instance(task.instance_id),
        agent=spec.agents[task.cell.agent],
        model=spec.models[task.cell.model] if task.cell.model else None,
        provider=provider,
        image=ImageSource.choose(plan.dataset, provider),
        harness=task.harness,
        agent_timeout=spec.timeouts.agent,
        grading_timeout=spec.timeouts.grading,
        max_patch_bytes=spec.limits.max_patch_bytes,
    )
