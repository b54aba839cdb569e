"""The patch-apply ladder, P2P regressions, tampering with tests, masking and infra errors, on docker."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import ClassVar, Literal

import polars as pl
import pytest

from anyswe.agents import Agent, AgentConfig, AgentContext, AgentOutcome, register_agent
from anyswe.datasets import load_dataset
from anyswe.experiment import Experiment

pytestmark = pytest.mark.containers


class SleepyConfig(AgentConfig):
    type: Literal["sleepy"] = "sleepy"


class SleepyAgent(Agent):
    """Edits a file, then never finishes: the executor's timeout must stop it."""

    name: ClassVar[str] = "sleepy"
    config_class = SleepyConfig
    needs_model = False

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        await ctx.sandbox.exec(["sh", "-c", "echo '# touched' >> calc.py"], workdir=ctx.workdir)
        await asyncio.sleep(3600)
        return AgentOutcome()


register_agent("sleepy", f"{__name__}:SleepyAgent")


class StallsConfig(AgentConfig):
    type: Literal["stalls-on-calc"] = "stalls-on-calc"


class StallsOnCalcAgent(Agent):
    """On demo__calc-1, writes the fix and then never finishes (a timeout its tests pass); on any
    other task, gives up at once (unresolved)."""

    name: ClassVar[str] = "stalls-on-calc"
    config_class = StallsConfig
    needs_model = False

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        if ctx.task.instance_id != "demo__calc-1":
            return AgentOutcome()
        fix = load_dataset("demo").by_id()["demo__calc-1"].patch  # the test's knowledge, not the agent's view
        await ctx.sandbox.write_file("/tmp/fix.diff", fix.encode())
        await ctx.sandbox.exec(["git", "apply", "/tmp/fix.diff"], workdir=ctx.workdir)
        await ctx.sandbox.exec(["rm", "-f", "/tmp/fix.diff"])
        await asyncio.sleep(3600)
        return AgentOutcome()


register_agent("stalls-on-calc", f"{__name__}:StallsOnCalcAgent")


def spec(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "spec.yaml"
    p.write_text("name: paths\ndataset: {name: demo}\nproviders:\n  docker: {type: docker, concurrency: 3}\n" + body)
    return p


def predictions(tmp_path: Path) -> Path:
    rows = load_dataset("demo").by_id()
    calc = rows["demo__calc-1"].patch
    # Context that no longer matches: git apply refuses, `patch --fuzz=5` applies it.
    fuzzy = calc.replace(" def sub(a, b):", " def sub(x, y):")
    assert fuzzy != calc
    # A "fix" that rewrites the tests to pass: the eval script restores them first.
    cheat = (
        "diff --git a/tests/test_stack.py b/tests/test_stack.py\n--- a/tests/test_stack.py\n+++ b/tests/test_stack.py\n"
        "@@ -1,4 +1,5 @@\n from stack import Stack\n+Stack.pop = lambda self: 2\n \n \n def test_len():\n"
    )
    preds = {
        "demo__leap-5": rows["demo__leap-5"].sloppy_patch,  # type: ignore[attr-defined]
        "demo__calc-1": fuzzy,
        "demo__wrap-6": "this is not a diff\n",
        "demo__stack-8": cheat,
        "demo__slug-2": rows["demo__slug-2"].patch,
    }
    path = tmp_path / "preds.jsonl"
    path.write_text(
        "".join(
            json.dumps({"instance_id": k, "model_name_or_path": "t", "model_patch": v}) + "\n" for k, v in preds.items()
        )
    )
    return path


@pytest.fixture(scope="module")
def replayed(runtimes: None, tmp_path_factory: pytest.TempPathFactory) -> pl.DataFrame:
    tmp = tmp_path_factory.mktemp("replay")
    body = (
        f"agents:\n  replay: {{type: replay, predictions: {predictions(tmp)}}}\n"
        "dataset:\n  name: demo\n"
        "  instance_ids: [demo__leap-5, demo__calc-1, demo__wrap-6, demo__stack-8, demo__slug-2]\n"
    )
    p = tmp / "spec.yaml"
    p.write_text("name: replay\nproviders:\n  docker: {type: docker, concurrency: 3}\n" + body)
    exp = Experiment.load(p, run_dir=tmp / "run")
    exp.run(progress=False)
    return exp.results()


def by_id(df: pl.DataFrame, iid: str) -> dict[str, object]:
    return df.filter(pl.col("instance_id") == iid).to_dicts()[0]


def test_sloppy_fix_breaks_pass_to_pass(replayed: pl.DataFrame, tmp_path: Path) -> None:
    row = by_id(replayed, "demo__leap-5")
    assert row["patch_applied"] and not row["resolved"] and not row["mask_sample"]


def test_ladder_falls_back_to_patch_fuzz(replayed: pl.DataFrame) -> None:
    row = by_id(replayed, "demo__calc-1")
    assert row["applied_by"] == "patch --batch --fuzz=5 -p1 -i" and row["resolved"]


def test_unappliable_patch_is_unresolved_not_masked(replayed: pl.DataFrame) -> None:
    row = by_id(replayed, "demo__wrap-6")
    assert row["patch_exists"] and not row["patch_applied"] and row["applied_by"] is None
    assert not row["resolved"] and not row["mask_sample"] and row["error_kind"] is None


def test_edits_to_test_files_are_reset(replayed: pl.DataFrame) -> None:
    row = by_id(replayed, "demo__stack-8")
    assert row["patch_applied"] and not row["resolved"]


def test_replayed_gold_resolves(replayed: pl.DataFrame) -> None:
    assert by_id(replayed, "demo__slug-2")["resolved"]


def test_agent_timeout_is_masked_and_still_graded(runtimes: None, tmp_path: Path) -> None:
    p = spec(tmp_path, "agents:\n  s: {type: sleepy}\ntimeouts: {agent: 3}\n")
    exp = Experiment.load(p, overrides=["dataset.instance_ids=[demo__calc-1]"], run_dir=tmp_path / "run")
    exp.run(progress=False)
    row = exp.results().to_dicts()[0]
    assert row["agent_timed_out"] and row["mask_sample"] and row["exit_reason"] == "timeout"
    assert row["time_agent"] < 30
    # What the agent did before the timeout was captured and graded.
    assert "# touched" in row["model_patch"] and row["patch_applied"] and not row["resolved"]


def test_a_cell_whose_agent_times_out_on_one_of_two_tasks_has_a_rate_over_both(runtimes: None, tmp_path: Path) -> None:
    """Issue 31, 6: the timed-out task counts as its tests said (here resolved), as swebench's report
    would count it; only the RL rate (Gym's mask) leaves it out."""
    from anyswe.results.tables import cell_table

    p = spec(tmp_path, "agents:\n  s: {type: stalls-on-calc}\ntimeouts: {agent: 3}\n")
    over = ["dataset.instance_ids=[demo__calc-1,demo__leap-5]"]
    exp = Experiment.load(p, overrides=over, run_dir=tmp_path / "run")
    exp.run(progress=False)
    rows = {r["instance_id"]: r for r in exp.results().to_dicts()}
    calc = rows["demo__calc-1"]
    assert (calc["agent_timed_out"], calc["resolved"], calc["mask_reason"]) == (True, True, "agent_timeout")
    assert not rows["demo__leap-5"]["resolved"] and not rows["demo__leap-5"]["mask_sample"]
    (cell,) = cell_table(exp.results()).to_dicts()
    assert (cell["resolved"], cell["scored"], cell["resolve_rate"]) == (1, 2, 0.5)
    assert (cell["rl_resolved"], cell["rl_scored"], cell["rl_rate"]) == (0, 1, 0.0)


def test_a_missing_image_is_masked_reported_at_once_and_tried_again_by_the_next_apply(
    runtimes: None, tmp_path: Path
) -> None:
    """A permanent infra error: no attempt within the apply changes it (transient ones are retried
    within it: test_faults), but the next apply tries again, since the image may have been made since."""
    p = spec(tmp_path, "agents:\n  g: {type: gold}\nretries: {max_attempts: 2, backoff: 0.1}\n")
    over = ["dataset.instance_ids=[demo__stack-8]", "providers.docker.image=anyswe/missing:{instance_id_docker}"]
    exp = Experiment.load(p, overrides=over, run_dir=tmp_path / "run")
    summary = exp.run(progress=False)
    assert (summary.ran, summary.errors, summary.permanent) == (1, 1, 1)
    row = exp.results().to_dicts()[0]
    assert row["error_kind"] == "infra" and row["mask_sample"] and "ImageNotFound" in row["error"]
    assert row["error_permanent"]
    exp.run(progress=False)
    lines = (tmp_path / "run" / "results.jsonl").read_text().splitlines()
    assert [json.loads(x)["attempt"] for x in lines] == [1, 2]
