"""Where a task's model replies come from, one class each, in one registry (``anyswe.upstreams``).

The driver's grant asks the model block's upstream for one task's :class:`~anyswe.gateway.server.Upstream`:
``http`` (the block's protocol at its URL, or any provider through litellm; the key read there),
``scripted`` (anyswe's deterministic model: a script per instance, or the oracle of the reference
patch, which only the host holds), ``replay`` (the trajectory the unit was given when it was built),
or a plugin's (an in-process policy, say).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

from anyswe.errors import AgentError, SpecError
from anyswe.registry import Registry

if TYPE_CHECKING:
    from anyswe.execute.unit import WorkUnit
    from anyswe.gateway import ScriptedModel
    from anyswe.gateway.replay import ReplayModel
    from anyswe.gateway.server import Upstream
    from anyswe.model import ModelSpec


class UpstreamSource(ABC):
    """Makes the upstream of one task's model calls."""

    name: ClassVar[str]

    @classmethod
    @abstractmethod
    def make(cls, unit: WorkUnit, model: ModelSpec) -> Upstream:
        """The upstream for ``unit``'s calls (an :class:`~anyswe.errors.AgentError`: that task's only)."""


class HttpSource(UpstreamSource):
    name: ClassVar[str] = "http"

    @classmethod
    def make(cls, unit: WorkUnit, model: ModelSpec) -> Upstream:
        from anyswe.gateway.upstream import HttpUpstream

        return HttpUpstream(model)


class ScriptedSource(UpstreamSource):
    name: ClassVar[str] = "scripted"

    @classmethod
    def make(cls, unit: WorkUnit, model: ModelSpec) -> Upstream:
        return scripted_upstream(unit, model)


class ReplaySource(UpstreamSource):
    name: ClassVar[str] = "replay"

    @classmethod
    def make(cls, unit: WorkUnit, model: ModelSpec) -> Upstream:
        return replay_upstream(unit)


UPSTREAMS: Registry[UpstreamSource] = Registry("model upstream", UpstreamSource, group="anyswe.upstreams")
for _cls in (HttpSource, ScriptedSource, ReplaySource):
    UPSTREAMS.register(_cls.name, _cls)


def upstream_source(name: str) -> type[UpstreamSource]:
    """The upstream registered as ``name`` (a :class:`~anyswe.errors.SpecError` naming the known ones)."""
    return UPSTREAMS.load(name)


def known_upstream(name: str) -> str:
    """``name`` if an upstream is registered under it (a model block's ``upstream``)."""
    try:
        upstream_source(name)
    except SpecError as exc:
        raise ValueError(str(exc)) from None
    return name


def scripted_upstream(unit: WorkUnit, model: ModelSpec) -> ScriptedModel:
    """The scripted model for one task: its script file, or the oracle of its reference patch."""
    from anyswe.gateway import ScriptedModel

    submit = unit.submit_command
    manner: dict[str, Any] = {"misbehave": model.misbehave, "delay": model.delay}
    if model.script is None:
        return ScriptedModel.oracle(unit.instance.patch, unit.workdir, submit=submit, **manner)
    path = model.script / f"{unit.instance.instance_id}.json"
    try:
        steps = json.loads(path.read_text())["steps"]
    except (OSError, ValueError, KeyError) as exc:
        raise AgentError(f"scripted model: no usable script for {unit.instance.instance_id} at {path}: {exc}") from None
    return ScriptedModel([str(s) for s in steps], submit=submit, **manner)


def replay_upstream(unit: WorkUnit) -> ReplayModel:
    """The recorded trajectory the unit was given (chosen when it was built), served again."""
    from anyswe.gateway.replay import AtifReplayModel, ReplayModel

    if unit.replay is None:  # a plugin's spec that chose upstream replay for a unit built without one
        raise AgentError(f"replay: {unit.instance.instance_id} was built without a replay source")
    if unit.replay.trajectory is None:
        raise AgentError(unit.replay.error or "replay: no recorded trajectory")
    if unit.replay.atif:
        return AtifReplayModel.load(unit.replay.trajectory)
    return ReplayModel.load(unit.replay.trajectory)
