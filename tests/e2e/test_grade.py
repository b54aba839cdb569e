"""``anyswe.grade``: one patch graded on its own, the same verdict a run gives it, on both runtimes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

import anyswe
from anyswe.datasets import load_dataset
from anyswe.errors import DatasetError
from anyswe.experiment import Experiment
from anyswe.sandbox import get_provider

pytestmark = pytest.mark.containers

INSTANCE = "demo__inventory-4"


@pytest.mark.parametrize("provider", ["docker", "apptainer"])
def test_grade_on_its_own_gives_the_verdict_a_run_gives(runtimes: None, tmp_path: Path, provider: str) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        f"name: g\ndataset: {{name: demo-swebench, instance_ids: [{INSTANCE}]}}\nagents:\n  gold: {{type: gold}}\n"
        f"providers:\n  p: {{type: {provider}}}\n"
    )
    exp = Experiment.load(spec, run_dir=tmp_path / "run")
    exp.run(progress=False)
    (row,) = exp.results().iter_rows(named=True)
    assert row["resolved"], row

    ds = load_dataset("demo-swebench")
    instance = ds.by_id()[INSTANCE]
    # By id with the dataset, and from the row with the same dataset: the run's verdict, tests and image.
    verdict = anyswe.grade(INSTANCE, row["model_patch"], provider, dataset=ds)
    assert verdict.resolved and verdict.applied_by == row["applied_by"] and verdict.harness == "swebench"
    assert verdict.image == row["image"] and verdict.image_digest == row["image_digest"]
    report = (exp.run_dir / "tasks" / row["key"] / "report.json").read_text()
    assert verdict.tests_status == json.loads(report)[INSTANCE]["tests_status"]
    # The async form, with a provider object, on a patch for a file that is not there: not applied.
    broken = "diff --git a/nowhere.py b/nowhere.py\n--- a/nowhere.py\n+++ b/nowhere.py\n@@ -1,2 +1,2 @@\n-a\n+b\n c\n"
    failed = asyncio.run(anyswe.grade_async(instance.model_dump(), broken, get_provider(provider), dataset=ds))
    assert not failed.resolved and failed.patch_exists and not failed.patch_applied, failed
    # An empty patch runs nothing.
    empty = anyswe.grade(instance, "", provider, dataset=ds)
    assert not empty.resolved and not empty.patch_exists and empty.image is not None


def test_grade_refuses_an_id_it_cannot_place() -> None:
    with pytest.raises(DatasetError, match="give the dataset it belongs to"):
        anyswe.grade(INSTANCE, "diff", "docker")
    with pytest.raises(DatasetError, match="has no instance 'nope'"):
        anyswe.grade("nope", "diff", "docker", dataset="demo")
