"""anyswe's own verdicts on the real SWE-bench Multilingual images (tests/e2e/test_real_multilingual.py
builds them and runs swebench's procedure on them by hand): its gold census (``anyswe gold-check``: a
gold and an empty pass per instance and runtime) and the noop agent through ``anyswe apply``, each
held to swebench's verdicts and test statuses by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mlkit import IDS, PROVIDERS, SPEC
from realkit import apply_spec, assert_census, census_cli, census_empty, census_gold_rows

from anyswe.datasets.instance import Instance
from anyswe.grading import diffs
from anyswe.results.schema import TaskResult

# The shared fixtures (ml_instances, ml_images, ml_by_hand, ml_verdicts) as a plugin of this module.
pytest_plugins = ["mlkit"]
# A session fixture's setup counts to its first test's timeout: the census grades every instance twice
# per runtime (redis's eval rebuilds it: 89 s idle), far past the default 900 s on busy CPUs.
pytestmark = [pytest.mark.containers, pytest.mark.real_images, pytest.mark.timeout(3600)]


# -- anyswe's own verdicts: the gold census (gold and empty passes), and `anyswe apply` --------------


@pytest.fixture(scope="session")
def ml_census(ml_images: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """``anyswe gold-check`` over the spec, one pass per provider: its directory and what it printed."""
    root = tmp_path_factory.mktemp("multilingual-census")
    r = census_cli(SPEC, root)
    return root / "census", r


@pytest.fixture(scope="session")
def ml_noop(
    ml_images: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> dict[tuple[str, str, str], TaskResult]:
    run_dir = tmp_path_factory.mktemp("multilingual-noop") / "run"
    return apply_spec(SPEC, run_dir, "matrix.agents=[noop]")


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("instance_id", IDS)
def test_anyswe_gold_and_empty_equal_swebench_by_hand(
    instance_id: str,
    provider: str,
    ml_census: tuple[Path, str],
    ml_noop: dict[tuple[str, str, str], TaskResult],
    ml_verdicts: dict[str, Any],
    ml_instances: dict[str, Instance],
) -> None:
    census, _ = ml_census
    gold = census_gold_rows(census)[instance_id, provider]
    assert gold.error_kind is None and not gold.mask_sample, gold.error
    assert gold.resolved is ml_verdicts[instance_id]["gold"]["resolved"]
    report = json.loads((census / "tasks" / gold.key / "report.json").read_text())[instance_id]
    assert report["tests_status"] == ml_verdicts[instance_id]["gold"]["tests_status"]
    # Captured against the base commit: the gold patch's files, no build output.
    assert diffs.touched_files(gold.model_patch) == diffs.touched_files(ml_instances[instance_id].patch)
    # The census's empty pass ran the tests on the image as built, as the by-hand empty run did.
    empty = census_empty(census)[instance_id, provider]
    assert empty["tests_status"] == ml_verdicts[instance_id]["empty"]["tests_status"]
    assert empty["verdict"] == "unresolved"
    # An agent's empty patch is unresolved without running anything, as swebench scores it.
    noop = ml_noop["noop", provider, instance_id]
    assert noop.error_kind is None and noop.model_patch == "" and noop.resolved is False, noop.error


def test_the_census_puts_every_instance_in_a_bucket_with_its_evidence(ml_census: tuple[Path, str]) -> None:
    census, printed = ml_census
    assert_census(census, IDS, PROVIDERS, printed)
