"""Agents by short name or as ``module:Class``: model-free ``gold``, ``noop``, ``replay``; host-driven
``mini-swe-agent``; in the sandbox ``claude-code``, ``openclaw``, ``hermes``, ``codex``, ``opencode``,
``pi``, ``gemini-cli``, ``cline``."""

from __future__ import annotations

import contextlib
import functools
from typing import TYPE_CHECKING

from anyswe.agents.base import (
    Agent,
    AgentConfig,
    AgentContext,
    AgentOutcome,
    AgentUsage,
    ExitReason,
    ModelEndpoint,
)
from anyswe.errors import AnysweError
from anyswe.registry import Registry

if TYPE_CHECKING:
    from collections.abc import Mapping

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
    "transcript_readers",
    "transcript_tool_results",
]

AGENTS: Registry[Agent] = Registry("agent type", Agent, group="anyswe.agents")
AGENTS.register("gold", "anyswe.agents.gold:GoldAgent")
AGENTS.register("noop", "anyswe.agents.noop:NoopAgent")
AGENTS.register("replay", "anyswe.agents.replay:ReplayAgent")
AGENTS.register("mini-swe-agent", "anyswe.agents.mini_swe_agent:MiniSweAgent")
AGENTS.register("claude-code", "anyswe.agents.claude_code:ClaudeCodeAgent")
AGENTS.register("openclaw", "anyswe.agents.openclaw:OpenClawAgent")
AGENTS.register("hermes", "anyswe.agents.hermes:HermesAgent")
AGENTS.register("codex", "anyswe.agents.codex:CodexAgent")
AGENTS.register("opencode", "anyswe.agents.opencode:OpenCodeAgent")
AGENTS.register("pi", "anyswe.agents.pi:PiAgent")
AGENTS.register("gemini-cli", "anyswe.agents.gemini_cli:GeminiCliAgent")
AGENTS.register("cline", "anyswe.agents.cline:ClineAgent")


def transcript_readers() -> dict[str, type[Agent]]:
    """Each agent's transcript file -> its class (anyswe's and plugins'; a broken plugin has none): where a
    task's files hold more than the gateway saw (gateway/trajectory.add_transcript_results)."""
    return _transcript_readers(AGENTS.generation)  # read again once an agent is registered or refreshed


@functools.cache
def _transcript_readers(generation: int) -> dict[str, type[Agent]]:
    found: dict[str, type[Agent]] = {}
    for name in AGENTS.names():
        with contextlib.suppress(AnysweError):
            cls = AGENTS.load(name)
            if cls.transcript is not None:
                found[cls.transcript] = cls
    return found


def transcript_tool_results(files: Mapping[str, str]) -> dict[str, tuple[str, bool]]:
    """Tool call id -> (what it returned, whether it failed), from whichever agent transcript ``files``
    (a task's artefacts by name) holds."""
    found: dict[str, tuple[str, bool]] = {}
    for name, cls in transcript_readers().items():
        if files.get(name):
            found |= cls.tool_results(files[name])
    return found


def register_agent(name: str, target: str | type[Agent]) -> None:
    """Register an agent class (or ``"module:Class"``) under a short name."""
    AGENTS.register(name, target)


def agent_names() -> list[str]:
    return AGENTS.names()


def agent_class(name: str) -> type[Agent]:
    """The agent class of a spec's ``type``: a short name or a dotted path ``module:Class``."""
    return AGENTS.load(name)
