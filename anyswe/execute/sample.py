"""A rollout as a trainer reads it: :class:`Rollout`, a view of the attempt's row (its Outcome as
written) with what the row points at read back (the tests' buckets, the trajectory, the files)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, computed_field

from anyswe.agents.base import AgentUsage
from anyswe.gateway.trajectory import Step
from anyswe.results.schema import TaskResult

if TYPE_CHECKING:
    from anyswe.execute.unit import TaskOutput

__all__ = ["Rollout"]


class Rollout(BaseModel):
    """One task's sample: a view of its row (the attempt's Outcome as written: reward and mask decided in
    execute/decide.py), with what the row points at read back: the tests' buckets, the trajectory, the files.
    Nothing here is a copy that could drift from the row: every verdict field is read from ``result``."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    #: The whole result row, as results.jsonl has it.
    result: TaskResult
    tests_status: dict[str, dict[str, list[str]]] = Field(
        default_factory=dict, description="swebench's buckets: FAIL_TO_PASS/PASS_TO_PASS/... -> success/failure."
    )
    trajectory: list[Step] = Field(default_factory=list, description="The model calls, in the trajectory contract.")
    trajectory_errors: list[str] = Field(
        default_factory=list,
        description="Each trajectory line that could not be read (file:line: why); its step is not in `trajectory`.",
    )
    #: The task's files (patch.diff, test_output.txt, eval.sh, agent.log, ...), by name.
    files: dict[str, str] = Field(default_factory=dict, repr=False)
    #: Where the rollout was recorded (None: nowhere).
    run_dir: Path | None = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def instance_id(self) -> str:
        return self.result.instance_id

    @computed_field  # type: ignore[prop-decorator]
    @property
    def reward(self) -> float:
        return self.result.reward

    @computed_field  # type: ignore[prop-decorator]
    @property
    def resolved(self) -> bool:
        return self.result.resolved

    @computed_field  # type: ignore[prop-decorator]
    @property
    def mask_sample(self) -> bool:
        return self.result.mask_sample

    @computed_field  # type: ignore[prop-decorator]
    @property
    def mask_reason(self) -> str | None:
        """Why it is masked (execute/decide.py's table); None if it is not."""
        return self.result.mask_reason

    @computed_field  # type: ignore[prop-decorator]
    @property
    def error_kind(self) -> str | None:
        return self.result.error_kind

    @computed_field  # type: ignore[prop-decorator]
    @property
    def error(self) -> str | None:
        return self.result.error

    @computed_field  # type: ignore[prop-decorator]
    @property
    def error_permanent(self) -> bool:
        """An infra error no attempt changes (else transient: worth a retry)."""
        return self.result.error_permanent

    @computed_field  # type: ignore[prop-decorator]
    @property
    def exit_reason(self) -> str | None:
        return self.result.exit_reason

    @computed_field  # type: ignore[prop-decorator]
    @property
    def agent_timed_out(self) -> bool:
        return self.result.agent_timed_out

    @computed_field  # type: ignore[prop-decorator]
    @property
    def patch(self) -> str:
        return self.result.model_patch

    @computed_field  # type: ignore[prop-decorator]
    @property
    def patch_exists(self) -> bool:
        return self.result.patch_exists

    @computed_field  # type: ignore[prop-decorator]
    @property
    def patch_applied(self) -> bool:
        return self.result.patch_applied

    @computed_field  # type: ignore[prop-decorator]
    @property
    def flags(self) -> list[str]:
        """Reward-hacking flags of the patch (grading/flags.py)."""
        return self.result.flags or []

    @computed_field  # type: ignore[prop-decorator]
    @property
    def token_prefix_chain(self) -> bool | None:
        """Whether the calls' token ids form one growing prefix chain (None: no token ids)."""
        return self.result.token_prefix_chain

    @computed_field  # type: ignore[prop-decorator]
    @property
    def usage(self) -> AgentUsage:
        return AgentUsage(**{f.name: getattr(self.result, f.name) for f in dataclasses.fields(AgentUsage)})

    @computed_field  # type: ignore[prop-decorator]
    @property
    def timings(self) -> dict[str, float | None]:
        """Seconds per phase (time_*)."""
        from anyswe.results.schema import TIME_FIELDS

        return {name: getattr(self.result, name) for name in TIME_FIELDS}

    @classmethod
    def of(cls, output: TaskOutput, trajectory: list[Step], run_dir: Path | None, lost: list[str]) -> Rollout:
        r = output.result
        report = json.loads(output.artifacts.get("report.json") or "{}")
        return cls(
            result=r,
            tests_status=report.get(r.instance_id, {}).get("tests_status") or {},
            trajectory=trajectory,
            trajectory_errors=lost,
            files=dict(output.artifacts),
            run_dir=run_dir,
        )
