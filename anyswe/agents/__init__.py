"""Agents by short name or as ``module:Class``: model-free ``gold``, ``noop``, ``replay``; host-driven
``mini-swe-agent``; in the sandbox ``claude-code``, ``openclaw``, ``hermes``."""

from __future__ import annotations

from anyswe.agents.base import (
    Agent,
    AgentConfig,
    AgentContext,
    AgentOutcome,
    AgentUsage,
    ExitReason,
    ModelEndpoint,
)
from anyswe.registry import Registry

__all__ = [
    "AGENTS",
    "Agent",
    "AgentConfig",
    "AgentContext",
    "AgentOutcome",
    "AgentUsage",
    "ExitReason",
    "ModelEndpoint",
    "agent_class",
    "agent_names",
    "register_agent",
]

AGENTS: Registry[Agent] = Registry("agent type", Agent)
AGENTS.register("gold", "anyswe.agents.gold:GoldAgent")
AGENTS.register("noop", "anyswe.agents.noop:NoopAgent")
AGENTS.register("replay", "anyswe.agents.replay:ReplayAgent")
AGENTS.register("mini-swe-agent", "anyswe.agents.mini_swe_agent:MiniSweAgent")
AGENTS.register("claude-code", "anyswe.agents.claude_code:ClaudeCodeAgent")
AGENTS.register("openclaw", "anyswe.agents.openclaw:OpenClawAgent")
AGENTS.register("hermes", "anyswe.agents.hermes:HermesAgent")


def register_agent(name: str, target: str | type[Agent]) -> None:
    """Register an agent class (or ``"module:Class"``) under a short name."""
    AGENTS.register(name, target)


def agent_names() -> list[str]:
    return AGENTS.names()


def agent_class(name: str) -> type[Agent]:
    """The agent class of a spec's ``type``: a short name or a dotted path ``module:Class``."""
    return AGENTS.load(name)
