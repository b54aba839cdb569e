"""anyswe's own verdicts on the real SWE-bench Multilingual images (tests/e2e/test_real_multilingual.py
builds them and runs swebench's procedure on them by hand): the gold and noop agents through
``anyswe apply`` on docker and apptainer, each held to swebench's verdicts and test statuses by hand.
The census of these instances (gold and empty passes, ``--passes 2``) is ``just census``'s."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mlkit import IDS, PROVIDERS, SPEC
from realkit import apply_spec, task_report

from anyswe.datasets.instance import Instance
from anyswe.grading import diffs
from anyswe.results.schema import TaskResult

# The shared fixtures (ml_instances, ml_images, ml_by_hand, ml_verdicts) as a plugin of this module.
pytest_plugins = ["mlkit"]
# A session fixture's setup counts to its first test's timeout: the run grades every instance on both
# runtimes (redis's eval rebuilds it: 89 s idle), far past the default 900 s on busy CPUs.
pytestmark = [pytest.mark.containers, pytest.mark.real_images, pytest.mark.timeout(3600)]


@pytest.fixture(scope="session")
def ml_run(
    ml_images: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, dict[tuple[str, str, str], TaskResult]]:
    """``anyswe apply specs/multilingual.yaml``: gold and noop on both runtimes; its directory and rows."""
    run_dir = tmp_path_factory.mktemp("multilingual-run") / "run"
    return run_dir, apply_spec(SPEC, run_dir)


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("instance_id", IDS)
def test_anyswe_gold_and_noop_equal_swebench_by_hand(
    instance_id: str,
    provider: str,
    ml_run: tuple[Path, dict[tuple[str, str, str], TaskResult]],
    ml_verdicts: dict[str, Any],
    ml_instances: dict[str, Instance],
) -> None:
    run_dir, rows = ml_run
    gold = rows["gold", provider, instance_id]
    assert gold.error_kind is None and not gold.mask_sample, gold.error
    assert gold.resolved is ml_verdicts[instance_id]["gold"]["resolved"]
    assert task_report(run_dir, gold)["tests_status"] == ml_verdicts[instance_id]["gold"]["tests_status"]
    # Captured against the base commit: the gold patch's files, no build output.
    assert diffs.touched_files(gold.model_patch) == diffs.touched_files(ml_instances[instance_id].patch)
    # An agent's empty patch is unresolved without running anything, as swebench scores it; the tests'
    # own verdict without the fix is the by-hand empty run's (test_real_multilingual.py).
    noop = rows["noop", provider, instance_id]
    assert noop.error_kind is None and noop.model_patch == "" and noop.resolved is False, noop.error
    assert ml_verdicts[instance_id]["empty"]["resolved"] is False
