"""``replay``: submits patches from a SWE-bench predictions file (instance_id, model_name_or_path, model_patch).

The patch is submitted as text, not applied here, so grading applies it with swebench's ladder
exactly as the official harness does with a predictions file: relative to the image's HEAD (its
"SWE-bench" setup commit), in a fresh sandbox of the instance image.
"""

from __future__ import annotations

from collections.abc import Collection
from functools import cached_property
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import ConfigDict, Field

from anyswe._text import json_rows
from anyswe.agents.base import Agent, AgentConfig, AgentContext, AgentOutcome
from anyswe.errors import AgentError


class ReplayConfig(AgentConfig):
    model_config = ConfigDict(extra="forbid")

    type: Literal["replay"] = "replay"
    predictions: Path = Field(description="SWE-bench predictions JSONL (or JSON list).")
    model_name_or_path: str | None = Field(default=None, description="Keep only this model's rows.")


class ReplayAgent(Agent):
    name: ClassVar[str] = "replay"
    config_class = ReplayConfig
    needs_model = False
    config: ReplayConfig

    @cached_property
    def patches(self) -> dict[str, str]:
        path = self.config.predictions
        if not path.is_file():
            raise AgentError(f"replay: predictions file not found: {path}")
        rows = json_rows(path, AgentError)
        out: dict[str, str] = {}
        for n, row in enumerate(rows, 1):
            if not isinstance(row, dict) or "instance_id" not in row or "model_patch" not in row:
                raise AgentError(f"replay: {path}: row {n} lacks instance_id or model_patch")
            if not isinstance(row["model_patch"], (str, type(None))):
                kind = type(row["model_patch"]).__name__
                raise AgentError(f"replay: {path}: row {n}: model_patch must be a string (a diff), not a {kind}")
            if self.config.model_name_or_path and row.get("model_name_or_path") != self.config.model_name_or_path:
                continue
            out[row["instance_id"]] = row["model_patch"] or ""
        return out

    def check(self, dataset_ids: Collection[str] = ()) -> None:
        if not self.patches:
            raise AgentError(
                f"replay: {self.config.predictions} has no predictions"
                + (f" for {self.config.model_name_or_path!r}" if self.config.model_name_or_path else "")
            )
        unknown = sorted(set(self.patches) - set(dataset_ids)) if dataset_ids else []
        if unknown:
            raise AgentError(
                f"replay: {self.config.predictions} predicts {len(unknown)} instance(s) the dataset does not "
                f"have: {', '.join(unknown[:5])}{' ...' if len(unknown) > 5 else ''} (another dataset's predictions?)"
            )

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        patch = self.patches.get(ctx.task.instance_id)
        if patch is None:  # reported as this task's agent error, not passed off as a plain "unresolved"
            raise AgentError(f"replay: {self.config.predictions} has no prediction for {ctx.task.instance_id}")
        ctx.log(f"replay: submitting {len(patch)} characters of patch")
        return AgentOutcome(submitted_patch=patch)
