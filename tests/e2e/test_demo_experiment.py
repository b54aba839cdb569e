"""The demo experiment end to end on both runtimes: gold resolves all, noop none, backends agree."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from anyswe.experiment import Experiment
from anyswe.results.schema import PHASE_FIELDS, SCHEMA_VERSION, TaskResult
from anyswe.results.store import read_rows

pytestmark = pytest.mark.containers

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def demo(runtimes: None, tmp_path_factory: pytest.TempPathFactory) -> Experiment:
    exp = Experiment.load(REPO / "specs" / "demo.yaml", run_dir=tmp_path_factory.mktemp("demo-run"))
    summary = exp.run(progress=False)
    assert summary.ran == len(exp.planned.tasks) == 32 and summary.errors == 0
    return exp


def test_gold_resolves_everything_and_noop_nothing(demo: Experiment) -> None:
    df = demo.results()
    assert df.height == 32 and df["error_kind"].is_null().all() and not df["mask_sample"].any()
    gold, noop = df.filter(pl.col("agent") == "gold"), df.filter(pl.col("agent") == "noop")
    assert gold["resolved"].all(), gold.filter(~pl.col("resolved"))["instance_id"].to_list()
    assert not noop["resolved"].any()
    assert set(gold["applied_by"]) == {"git apply --verbose"}
    assert not noop["patch_exists"].any()


def test_backends_agree_task_by_task(demo: Experiment) -> None:
    df = demo.results()
    wide = df.pivot(on="provider", index=["agent", "instance_id", "sample"], values="resolved")
    assert wide.height == 16
    assert (wide["docker"] == wide["apptainer"]).all()


def test_run_directory_contents(demo: Experiment) -> None:
    run = demo.run_dir
    assert (run / "spec.yaml").is_file() and json.loads((run / "plan.json").read_text())["instances"] == 8
    rows = read_rows(run / "results.jsonl")
    for key in (
        "key",
        "agent",
        "model",
        "provider",
        "instance_id",
        "sample",
        "resolved",
        "reward",
        "mask_sample",
        "error_kind",
        "patch_exists",
        "model_patch",
        "applied_by",
        "agent_timed_out",
        "exit_reason",
        *PHASE_FIELDS,
    ):
        assert all(key in r for r in rows), key
    # The phases partition each task's wall time: none is left out (5.7 s per task were, issue 35).
    for r in rows:
        phases = [r[name] for name in PHASE_FIELDS if r[name] is not None]
        assert len(phases) == len(PHASE_FIELDS), r
        assert abs(sum(phases) - r["time_total"]) <= 0.001 * len(phases), r
    # Every line of results.jsonl is a TaskResult of the current schema, as written.
    for line in (run / "results.jsonl").read_text().splitlines():
        assert TaskResult.model_validate_json(line).schema_version == SCHEMA_VERSION
    gold = next(r for r in rows if r["agent"] == "gold" and r["instance_id"] == "demo__settings-3")
    task_dir = run / "tasks" / gold["key"]
    assert "new file mode" in (task_dir / "patch.diff").read_text()  # git capture includes new files
    report = json.loads((task_dir / "report.json").read_text())["demo__settings-3"]
    assert report["resolved"] is True and report["patch_successfully_applied"] is True
    assert report["tests_status"]["FAIL_TO_PASS"]["success"] == [
        "tests/test_settings.py::test_defaults_fill_missing_keys"
    ]
    assert ">>>>> Start Test Output" in (task_dir / "test_output.txt").read_text()
    assert (task_dir / "eval.sh").read_text().startswith("#!/bin/bash")
    for cell, rate in (("gold.none.docker", 1.0), ("gold.none.apptainer", 1.0), ("noop.none.docker", 0.0)):
        agg = json.loads((run / "cells" / cell / "aggregate_metrics.json").read_text())
        assert agg["mean/reward"] == rate and agg["mean/mask_sample"] == 0.0 and agg["count"] == 8
        assert agg["max/time_grading"] >= agg["median/time_grading"] >= agg["min/time_grading"] >= 0
        # Only real patches start a grading sandbox; an empty one is unresolved without one.
        assert (agg["min/time_grading"] > 0.1) == (rate == 1.0)


def test_slow_task_and_skipped_test(demo: Experiment) -> None:
    df = demo.results()
    slow = df.filter((pl.col("instance_id") == "demo__retry-7") & (pl.col("agent") == "gold"))
    assert (slow["time_grading"] >= 10).all()
    wrap = df.filter((pl.col("instance_id") == "demo__wrap-6") & (pl.col("agent") == "gold"))["key"][0]
    out = (demo.run_dir / "tasks" / wrap / "test_output.txt").read_text()
    assert "SKIPPED" in out and "1 skipped" in out


def test_reapply_runs_nothing(demo: Experiment) -> None:
    before = (demo.run_dir / "results.jsonl").read_bytes()
    summary = demo.run(progress=False)
    assert (summary.ran, summary.skipped) == (0, 32)
    assert (demo.run_dir / "results.jsonl").read_bytes() == before


def test_cell_table(demo: Experiment) -> None:
    cells = {r["cell"]: r for r in demo.cells().to_dicts()}
    assert cells["gold.none.apptainer"]["resolve_rate"] == 1.0 and cells["noop.none.docker"]["resolve_rate"] == 0.0
    assert all(c["tasks"] == 8 for c in cells.values())
