"""A task instance in SWE-bench's schema, and the part of it an agent may see."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from anyswe._files import name_problem


class Instance(BaseModel):
    """One row of a SWE-bench-style dataset (FAIL_TO_PASS/PASS_TO_PASS may be JSON strings, as on the hub)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    instance_id: str = Field(min_length=1)
    repo: str = Field(min_length=1)
    base_commit: str = Field(min_length=1)
    patch: str = ""
    test_patch: str
    problem_statement: str = ""
    FAIL_TO_PASS: list[str]
    PASS_TO_PASS: list[str] = Field(default_factory=list)
    version: str = ""
    hints_text: str = ""
    created_at: str = ""
    environment_setup_commit: str = ""

    @field_validator("instance_id")
    @classmethod
    def _one_path_component(cls, value: str) -> str:
        # The id names the task's directory and files: `../` in it would write outside the run.
        problem = name_problem(value)
        if problem is not None:
            raise ValueError(f"{value[:80]!r} {problem} (it names directories and files)")
        return value

    @field_validator("FAIL_TO_PASS", "PASS_TO_PASS", mode="before")
    @classmethod
    def _json_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                return json.loads(value) if value.strip() else []
            except json.JSONDecodeError as exc:
                raise ValueError(f"expected a JSON list of test names, found {value[:60]!r} ({exc})") from None
        return value

    @field_validator("version", mode="before")
    @classmethod
    def _version_str(cls, value: Any) -> Any:
        return str(value) if value is not None else ""

    def agent_view(self) -> AgentView:
        return AgentView(
            instance_id=self.instance_id,
            repo=self.repo,
            base_commit=self.base_commit,
            problem_statement=self.problem_statement,
        )


class AgentView(BaseModel):
    """What an agent is told about its task: never the gold patch, the test patch or the test names."""

    model_config = ConfigDict(frozen=True)

    instance_id: str
    repo: str
    base_commit: str
    problem_statement: str
