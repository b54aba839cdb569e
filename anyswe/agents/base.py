"""The agent interface: an agent works inside a sandbox on a task it sees through an AgentView.

Agents never see the gold patch, the test patch or the test names (``AgentView`` carries none of
them) and never import grading; the model-free reference agents are told the gold patch
explicitly by the executor because checking the grader with it is their whole purpose.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict

from anyswe.model import ModelEndpoint, ModelSpec

if TYPE_CHECKING:
    from anyswe.datasets.instance import AgentView
    from anyswe.sandbox import Sandbox, SandboxRequest

__all__ = ["Agent", "AgentConfig", "AgentContext", "AgentOutcome", "AgentUsage", "ExitReason", "ModelEndpoint"]


class ExitReason(StrEnum):
    """Why an agent stopped."""

    SUBMITTED = "submitted"
    MAX_ITERATIONS = "max_iterations"
    CONTEXT_WINDOW = "context_window"
    TIMEOUT = "timeout"
    ERROR = "error"
    #: A budget (calls, tokens, time, turns) set by the host ran out.
    BUDGET = "budget"


class AgentConfig(BaseModel):
    """Base of every agent's own config (the ``agents.<name>`` block of a spec).

    The spec first reads only ``type`` (extra keys allowed), then validates the block with the
    agent's own config class, which forbids unknown keys.
    """

    model_config = ConfigDict(extra="allow")

    type: str

    def key_payload(self) -> dict[str, Any]:
        """The fields that can change a result, for the task key: all but those declared result-neutral
        (``anyswe.sandbox.request.neutral``: how much of a transcript is kept, say), so such a field, added
        or changed, leaves the keys of tasks already run as they were."""
        fields = type(self).model_fields
        return {
            k: v
            for k, v in self.model_dump().items()
            if k not in fields or not (fields[k].json_schema_extra or {}).get("result_neutral")  # type: ignore[union-attr]
        }


@dataclass
class AgentContext:
    """What an agent gets to work with for one task."""

    sandbox: Sandbox[Any]
    task: AgentView
    workdir: str
    timeout: float
    #: The model endpoint of this task's cell (None for model-free agents).
    model: ModelEndpoint | None = None
    #: Only for the model-free reference agent `gold`: the reference patch.
    reference_patch: str | None = None
    #: A per-task host directory for the agent's own state (agents that run in the sandbox mount it).
    state_dir: Path | None = None
    log_lines: list[str] = field(default_factory=list)

    def log(self, line: str) -> None:
        self.log_lines.append(line)


@dataclass
class AgentUsage:
    """What an agent's model calls cost; summed into the task's result."""

    model_calls: int = 0
    turns: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float | None = None


@dataclass
class AgentOutcome:
    exit_reason: ExitReason = ExitReason.SUBMITTED
    #: A patch submitted as text; when None the executor captures the work tree's diff instead.
    submitted_patch: str | None = None
    usage: AgentUsage = field(default_factory=AgentUsage)
    #: Host path of the agent's own trajectory file, if it keeps one.
    trajectory_path: str | None = None
    #: Files the agent wants kept with the task (name -> text), e.g. its own transcript.
    artifacts: dict[str, str] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)


class Agent(ABC):
    """A plain class with its own pydantic config, chosen by its short ``name``."""

    name: ClassVar[str]
    config_class: ClassVar[type[AgentConfig]]
    #: Model-free agents combine with no model in the matrix.
    needs_model: ClassVar[bool] = True
    #: Only reference agents are given the gold patch.
    needs_reference: ClassVar[bool] = False
    #: The shell command with which this agent says it is done (the scripted model ends with it).
    submit_command: ClassVar[str | None] = None
    #: Paths in the repository the agent writes for itself (logs, state): kept out of the captured patch.
    capture_excludes: ClassVar[tuple[str, ...]] = ()
    #: The task file of the agent's own transcript (``agent-<artefact name>``) when it holds what the
    #: gateway cannot see (:meth:`tool_results`); None: the gateway's trajectory is the whole story.
    transcript: ClassVar[str | None] = None

    @classmethod
    def release(cls) -> str | None:
        """The agent's own pinned release (exports name it); None for anyswe's own agents."""
        return None

    @classmethod
    def tool_results(cls, transcript: str) -> dict[str, tuple[str, bool]]:
        """Tool call id -> (what it returned, whether it failed), read from the agent's own transcript."""
        return {}

    def __init__(self, config: AgentConfig, model: ModelSpec | None = None) -> None:
        """One agent object per (agent, model) cell; ``model`` is None for model-free agents."""
        self.config = config
        self.model = model

    def check(self, dataset_ids: Collection[str] = ()) -> None:  # noqa: B027 - optional hook
        """Raise :class:`AgentError` if the agent cannot run at all (checked at plan time, before any work).

        ``dataset_ids``: every instance of the dataset (before the spec's filters), for agents that
        bring their own per-instance inputs.
        """

    @classmethod  # noqa: B027 - an optional hook
    def check_model(cls, config: AgentConfig, model: ModelSpec) -> None:
        """Raise :class:`AgentError` if this agent cannot talk to ``model`` (checked per cell at plan time)."""

    @classmethod
    def gateway_turn_cap(cls, config: AgentConfig) -> int | None:
        """A turn cap the model gateway keeps for this agent (for agents that have none of their own)."""
        return None

    def sandbox_request(
        self, request: SandboxRequest, *, model: ModelEndpoint | None, state_dir: Path
    ) -> SandboxRequest:
        """The task's sandbox as this agent needs it (mounts, network); the default request by default."""
        return request

    @abstractmethod
    async def run(self, ctx: AgentContext) -> AgentOutcome:
        """Work on the task inside ``ctx.sandbox``; the executor enforces ``ctx.timeout``."""
