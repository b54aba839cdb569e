"""A rollout's agent, provider and model blocks, validated by their own classes (a SpecError naming the field):
for :class:`~anyswe.execute.rollout.Rollouts` as it makes a unit, and for a server as it starts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from anyswe.errors import SpecError, first_problem

if TYPE_CHECKING:
    from anyswe.model import ModelSpec


def config_block(value: Any, types: Any, what: str) -> Any:
    """A config block from a mapping (validated by the class its ``type`` names) or as given."""
    if not isinstance(value, Mapping):
        return value
    raw = dict(value)
    if not isinstance(raw.get("type"), str):
        raise SpecError(f"rollout: {what} needs a `type`")
    try:
        return types(raw["type"]).model_validate(raw)
    except ValidationError as exc:
        raise SpecError(f"rollout: {what}.{first_problem(exc)}") from None


def model_block(value: ModelSpec | Mapping[str, Any] | None) -> ModelSpec | None:
    from anyswe.model import ModelSpec

    if value is None or isinstance(value, ModelSpec):
        return value
    try:
        return ModelSpec.model_validate(dict(value))
    except ValidationError as exc:
        raise SpecError(f"rollout: model.{first_problem(exc)}") from None


def check_block(kind: str, block: Mapping[str, Any] | str) -> None:
    """Validate an agent, provider or model block as :meth:`Rollouts.unit` will (a SpecError naming
    the field), before any runs: a server checks the blocks it declares when it starts."""
    from anyswe.spec import agent_config_class, provider_config_class

    if kind == "model":
        model_block(block if isinstance(block, Mapping) else {"api": block})
    else:
        block = {"type": block} if isinstance(block, str) else block
        config_block(block, agent_config_class if kind == "agent" else provider_config_class, kind)
