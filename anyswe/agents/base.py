"""The agent interface: an agent works inside a sandbox on a task it sees through an AgentView.

Agents never see the gold patch, the test patch or the test names (``AgentView`` carries none of
them) and never import grading; the model-free reference agents are told the gold patch
explicitly by the executor because checking the grader with it is their whole purpose.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from anyswe.datasets.instance import AgentView
    from anyswe.sandbox import Sandbox


class ExitReason(StrEnum):
    """Why an agent stopped."""

    SUBMITTED = "submitted"
    MAX_ITERATIONS = "max_iterations"
    CONTEXT_WINDOW = "context_window"
    TIMEOUT = "timeout"
    ERROR = "error"


class AgentConfig(BaseModel):
    """Base of every agent's own config (the ``agents.<name>`` block of a spec).

    The spec first reads only ``type`` (extra keys allowed), then validates the block with the
    agent's own config class, which forbids unknown keys.
    """

    model_config = ConfigDict(extra="allow")

    type: str


@dataclass
class AgentContext:
    """What an agent gets to work with."""

    sandbox: Sandbox
    task: AgentView
    workdir: str
    timeout: float
    #: Only for the model-free reference agent `gold`: the reference patch.
    reference_patch: str | None = None
    log_lines: list[str] = field(default_factory=list)

    def log(self, line: str) -> None:
        self.log_lines.append(line)


@dataclass
class AgentOutcome:
    exit_reason: ExitReason = ExitReason.SUBMITTED
    #: A patch submitted as text; when None the executor captures the work tree's diff instead.
    submitted_patch: str | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)


class Agent(ABC):
    """A plain class with its own pydantic config, chosen by its short ``name``."""

    name: ClassVar[str]
    config_class: ClassVar[type[AgentConfig]]
    #: Model-free agents combine with no model in the matrix.
    needs_model: ClassVar[bool] = True
    #: Only reference agents are given the gold patch.
    needs_reference: ClassVar[bool] = False

    def __init__(self, config: AgentConfig) -> None:
        self.config = config

    def check(self) -> None:  # noqa: B027 - optional hook
        """Raise :class:`AgentError` if the agent cannot run at all (checked at plan time, before any work)."""

    @abstractmethod
    async def run(self, ctx: AgentContext) -> AgentOutcome:
        """Work on the task inside ``ctx.sandbox``; the executor enforces ``ctx.timeout``."""
