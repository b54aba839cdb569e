"""Agents, registered by short name. Model-free: ``gold``, ``noop``, ``replay``."""

from __future__ import annotations

import importlib

from anyswe.agents.base import Agent, AgentConfig, AgentContext, AgentOutcome, ExitReason
from anyswe.errors import SpecError

__all__ = [
    "Agent",
    "AgentConfig",
    "AgentContext",
    "AgentOutcome",
    "ExitReason",
    "agent_class",
    "agent_names",
    "register_agent",
]

# short name -> "module:Class"; modules load on first use.
_AGENTS: dict[str, str] = {
    "gold": "anyswe.agents.gold:GoldAgent",
    "noop": "anyswe.agents.noop:NoopAgent",
    "replay": "anyswe.agents.replay:ReplayAgent",
}


def register_agent(name: str, target: str) -> None:
    """Register an agent class as ``"module:Class"`` under a short name."""
    _AGENTS[name] = target


def agent_names() -> list[str]:
    return sorted(_AGENTS)


def agent_class(name: str) -> type[Agent]:
    try:
        module, cls = _AGENTS[name].split(":")
    except KeyError:
        raise SpecError(f"unknown agent type {name!r}; known: {', '.join(agent_names())}") from None
    found: type[Agent] = getattr(importlib.import_module(module), cls)
    return found
