"""A task whose row could not be recorded is an error everywhere: its row, apply's summary and exit, status, results."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import ClassVar, Literal

import pytest
from typer.testing import CliRunner

from anyswe.agents import AgentContext, AgentOutcome, register_agent
from anyswe.agents.gold import GoldAgent, GoldConfig
from anyswe.cli import app
from anyswe.results.store import read_results

pytestmark = pytest.mark.containers


class UnwritableConfig(GoldConfig):
    type: Literal["gold-unwritable"] = "gold-unwritable"  # type: ignore[assignment]


class UnwritableAgent(GoldAgent):
    """Resolves the task (the gold patch), and leaves an artefact that cannot be written: in a folder
    that does not exist, as an artefact past a full disk or a vanished run directory cannot be (a lone
    surrogate, this test's first way, is now written as U+FFFD: issue 31)."""

    name: ClassVar[str] = "gold-unwritable"
    config_class = UnwritableConfig

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        outcome = await super().run(ctx)
        outcome.artifacts["no-such-folder/notes.txt"] = "notes"
        return outcome


register_agent("gold-unwritable", f"{__name__}:UnwritableAgent")


def test_a_resolved_task_that_cannot_be_recorded_is_an_unresolved_error(docker_image: str, tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "name: unwritable\ndataset: {name: demo, instance_ids: [demo__calc-1]}\n"
        "agents:\n  g: {type: gold-unwritable}\nproviders:\n  docker: {type: docker}\n"
    )
    out = tmp_path / "run"
    runner = CliRunner()
    r = runner.invoke(app, ["apply", str(spec), "--out", str(out)])
    assert r.exit_code == 1, r.output
    assert "(0 resolved, 1 with errors: 1 internal)" in r.output, r.output
    (row,) = read_results(out / "results.jsonl")
    assert (row.resolved, row.reward, row.error_kind, row.mask_sample) == (False, 0.0, "internal", True)
    assert "recording the task's results failed: FileNotFoundError" in (row.error or "")
    status = runner.invoke(app, ["status", str(out)])
    # planned, finished, resolved, errors, pending
    assert re.search(r"g\.none\.docker\W+1\W+1\W+0\W+1\W+0\W", status.output), status.output
    (cell,) = (json.loads(line) for line in runner.invoke(app, ["results", str(out), "--json"]).output.splitlines())
    assert (cell["tasks"], cell["resolved"], cell["masked"]) == (1, 0, 1), cell
