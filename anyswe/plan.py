"""The planner: a spec becomes cells (agent x model x provider) and tasks (cell x instance x sample).

Each task has a stable key: a hash of everything that can change its result (agent config with
files replaced by their content hash, model id and parameters, the provider config's fields not
declared result-neutral, the instance row, timeouts, harness, sample index) and nothing that
cannot (paths, ports, names, times), so re-applying a spec finds its finished tasks again.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from anyswe.agents import agent_class
from anyswe.datasets import Dataset, Instance, filter_instances, load_dataset
from anyswe.datasets.exclusions import Exclusions
from anyswe.errors import AgentError, PlanError
from anyswe.grading import harness_for
from anyswe.model import ModelSpec
from anyswe.spec import LimitSpec, MatrixRule, Spec


@dataclass(frozen=True, order=True)
class Cell:
    agent: str
    model: str | None
    provider: str

    @property
    def id(self) -> str:
        return f"{self.agent}.{self.model or 'none'}.{self.provider}"


@dataclass(frozen=True)
class Task:
    cell: Cell
    instance_id: str
    sample: int
    key: str
    #: The harness that grades this task (routing of ``auto`` resolved once, at plan time).
    harness: str = ""

    def row(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "cell": self.cell.id,
            "agent": self.cell.agent,
            "model": self.cell.model,
            "provider": self.cell.provider,
            "instance_id": self.instance_id,
            "sample": self.sample,
        }


@dataclass
class Plan:
    spec: Spec
    dataset: Dataset
    instances: list[Instance]
    cells: list[Cell]
    tasks: list[Task] = field(default_factory=list)
    #: Instances left out on every provider (``dataset.exclude``/``exclude_file``): id -> reason.
    excluded: dict[str, str] = field(default_factory=dict)
    exclusion_files: list[str] = field(default_factory=list)

    def instance(self, instance_id: str) -> Instance:
        return self._by_id[instance_id]

    def __post_init__(self) -> None:
        self._by_id = {i.instance_id: i for i in self.instances}

    def cell_rows(self) -> list[dict[str, Any]]:
        counts: dict[Cell, int] = {}
        for t in self.tasks:
            counts[t.cell] = counts.get(t.cell, 0) + 1
        return [
            {
                "cell": c.id,
                "agent": c.agent,
                "model": c.model,
                "provider": c.provider,
                "provider_type": self.spec.providers[c.provider].type,
                "tasks": counts.get(c, 0),
            }
            for c in self.cells
        ]

    def to_json(self) -> dict[str, Any]:
        return {
            "spec": self.spec.name,
            "dataset": self.dataset.name,
            "harness": self.harness_name,
            "instances": len(self.instances),
            "samples": self.spec.samples,
            "cells": self.cell_rows(),
            "warnings": self.warnings,
            "notes": self.notes,
            "excluded": self.excluded,
            "exclusion_files": self.exclusion_files,
            "tasks": [t.row() for t in self.tasks],
        }

    @property
    def warnings(self) -> list[str]:
        """What the user should know before running: sandboxes that are not sealed."""
        out = []
        for name in sorted({c.provider for c in self.cells}):
            network = getattr(self.spec.providers[name], "network", None)
            if network in ("bridge", "host"):
                out.append(
                    f"providers.{name}.network is {network!r}: agents and tests can reach the host and "
                    "whatever it reaches (the default, 'none', seals the sandboxes)"
                )
        return out

    @property
    def notes(self) -> list[str]:
        """How each provider keeps its sandboxes' limits, where a reader should know (its config says)."""
        return [
            note for name in sorted({c.provider for c in self.cells}) for note in self.spec.providers[name].notes(name)
        ]

    @property
    def harness_name(self) -> str:
        """The spec's or the dataset's harness choice (``auto`` routes each instance)."""
        return self.spec.grading.harness or self.dataset.harness


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def _content_of_paths(obj: Any) -> Any:
    """Replace file paths by the hash of their content: the key must not depend on where files are."""
    if isinstance(obj, dict):
        return {k: _content_of_paths(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_content_of_paths(v) for v in obj]
    if isinstance(obj, Path):
        if obj.is_dir():
            files = sorted(f for f in obj.rglob("*") if f.is_file())
            return {"tree": {str(f.relative_to(obj)): _content_of_paths(f) for f in files}}
        return {"sha256": hashlib.sha256(obj.read_bytes()).hexdigest()} if obj.is_file() else {"missing": True}
    return obj


def _matches(rule: MatrixRule, cell: Cell) -> bool:
    return all(
        want is None or want == have
        for want, have in ((rule.agent, cell.agent), (rule.model, cell.model), (rule.provider, cell.provider))
    )


def expand_cells(spec: Spec) -> list[Cell]:
    """The matrix product, then ``include`` added and ``exclude`` removed; incompatible pairs rejected."""
    agents = spec.matrix.agents or list(spec.agents)
    models = spec.matrix.models if spec.matrix.models is not None else list(spec.models)
    providers = spec.matrix.providers or list(spec.providers)

    def needs_model(agent: str) -> bool:
        return agent_class(spec.agents[agent].type).needs_model

    cells: list[Cell] = []
    for agent in agents:
        if needs_model(agent):
            if not models:
                raise PlanError(f"agent {agent!r} ({spec.agents[agent].type}) needs a model, and none is declared")
            cells += [Cell(agent, m, p) for m in models for p in providers]
        else:
            cells += [Cell(agent, None, p) for p in providers]
    for n, rule in enumerate(spec.matrix.include):
        if rule.agent is None or rule.provider is None:
            raise PlanError(f"matrix.include[{n}]: an included cell needs at least `agent` and `provider`")
        for kind, name, declared in (("agent", rule.agent, spec.agents), ("provider", rule.provider, spec.providers)):
            if name not in declared:
                raise PlanError(f"matrix.include[{n}]: unknown {kind} {name!r}")
        if needs_model(rule.agent) and rule.model is None:
            raise PlanError(f"matrix.include[{n}]: agent {rule.agent!r} needs a model")
        if not needs_model(rule.agent) and rule.model is not None:
            raise PlanError(
                f"matrix.include[{n}]: agent {rule.agent!r} ({spec.agents[rule.agent].type}) is model-free "
                f"and cannot be combined with model {rule.model!r}"
            )
        if rule.model is not None and rule.model not in spec.models:
            raise PlanError(f"matrix.include[{n}]: unknown model {rule.model!r}")
        cell = Cell(rule.agent, rule.model, rule.provider)
        if cell not in cells:
            cells.append(cell)
    cells = [c for c in cells if not any(_matches(r, c) for r in spec.matrix.exclude)]
    if not cells:
        raise PlanError("the matrix is empty after include/exclude")
    return cells


def task_key(spec: Spec, cell: Cell, instance: Instance, sample: int, harness: str) -> str:
    agent_cfg = spec.agents[cell.agent]
    provider = spec.providers[cell.provider]
    model = spec.models[cell.model] if cell.model else None
    payload = {
        "agent": _content_of_paths(agent_cfg.key_payload()),
        "model": None if model is None else _content_of_paths(model.key_payload()),
        "provider": provider.key_payload(),
        "instance": _digest(instance.model_dump(mode="json")),
        "timeouts": {"agent": spec.timeouts.agent, "grading": spec.timeouts.grading},
        "harness": harness,
        "sample": sample,
        # Only a cap other than the default is in the key: keys of runs from before the caps stay
        # (the default is far above any real patch), and a cap set lower runs the tasks again.
        **({"limits": spec.limits.model_dump()} if spec.limits != LimitSpec() else {}),
        # Likewise a reward policy for flagged samples other than the default.
        **({"tampered": spec.grading.tampered} if spec.grading.tampered != "zero" else {}),
    }
    return f"{_digest(payload)[:16]}__{instance.instance_id}"


def _check_model(name: str, model: ModelSpec, instances: list[Instance]) -> None:
    if model.script is not None:
        missing = [i.instance_id for i in instances if not (model.script / f"{i.instance_id}.json").is_file()]
        if missing:
            raise PlanError(f"models.{name}.script: no script in {model.script} for {', '.join(missing)}")


def make_plan(spec: Spec, dataset: Dataset | None = None) -> Plan:
    """Expand ``spec``; the dataset is loaded (and filtered) unless given."""
    ds = spec.dataset
    if dataset is None:
        dataset = load_dataset(ds.name, ds.path, split=ds.split, assets=ds.assets)
    exclusions = Exclusions.of(ds.exclude, ds.exclude_file)
    chosen = filter_instances(dataset.instances, instance_ids=ds.instance_ids, repos=ds.repos)
    # Excluded before the sample is drawn: a limit of N still runs N instances.
    excluded = {i.instance_id: exclusions.reasons[i.instance_id] for i in chosen if i.instance_id in exclusions}
    instances = filter_instances([i for i in chosen if i.instance_id not in excluded], limit=ds.limit, seed=ds.seed)
    if not instances:
        raise PlanError(f"dataset {dataset.name!r} has no instances left after filtering")
    cells = expand_cells(spec)
    for name in sorted({c.agent for c in cells}):
        cfg = spec.agents[name]
        try:
            agent_class(cfg.type)(cfg).check([i.instance_id for i in dataset.instances])
        except AgentError as exc:
            raise PlanError(f"agents.{name}: {exc}") from None
    for name in sorted({c.model for c in cells if c.model}):
        _check_model(name, spec.models[name], instances)
    for agent, model in sorted({(c.agent, c.model) for c in cells if c.model}):
        cfg = spec.agents[agent]
        try:
            agent_class(cfg.type).check_model(cfg, spec.models[model])
        except AgentError as exc:
            raise PlanError(f"agents.{agent} with models.{model}: {exc}") from None
    for cell in cells:
        provider = spec.providers[cell.provider]
        if not (dataset.builds_images or dataset.image_template or provider.names_own_images()):
            raise PlanError(
                f"provider {cell.provider!r}: dataset {dataset.name!r} does not build its images; "
                f"set providers.{cell.provider}.image"
            )
    plan = Plan(spec=spec, dataset=dataset, instances=instances, cells=cells, excluded=excluded)
    plan.exclusion_files = exclusions.files
    choice = plan.harness_name
    graded_by = {
        i.instance_id: harness_for(i, spec_harness=spec.grading.harness, dataset_harness=dataset.harness)
        for i in instances
    }
    plan.tasks = [
        Task(cell, inst.instance_id, s, task_key(spec, cell, inst, s, choice), graded_by[inst.instance_id])
        for cell in cells
        for inst in instances
        for s in range(spec.samples)
    ]
    return plan


__all__ = ["Cell", "Plan", "Task", "expand_cells", "make_plan", "task_key"]
