"""What the two files of the Multilingual tier share: its spec and instances, the images (built once by
``prepare images --build``: the image store's per-image file locks make a second worker wait for the
first's build rather than build again), and swebench's own verdicts by hand (realkit's references,
made once under a lock and kept). Two files so pytest-xdist runs them on two workers: the verdicts of
tests/e2e/test_real_multilingual_verdicts.py (anyswe apply of gold and noop) beside the by-hand runs and the agent of
tests/e2e/test_real_multilingual.py, where one file kept one worker busy for the whole container
phase of a cold CI run."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from realkit import ByHandRun, by_hand_verdicts_of, gold_and_empty_by_hand

from anyswe.datasets.instance import Instance
from anyswe.grading import swebench as sb

REPO_ROOT = Path(__file__).resolve().parents[2]
SPEC = REPO_ROOT / "specs" / "multilingual.yaml"
C_IDS = ("jqlang__jq-2839", "fmtlib__fmt-3248", "redis__redis-12472")
JS_IDS = ("axios__axios-6539", "preactjs__preact-4152")
IDS = C_IDS + JS_IDS
PROVIDERS = ("docker", "apptainer")


@pytest.fixture(scope="session")
def ml_instances(shared_swebench: Path) -> dict[str, Instance]:
    from anyswe.plan import make_plan
    from anyswe.spec import load_spec

    plan = make_plan(load_spec(SPEC))
    found = {i.instance_id: i for i in plan.instances}
    assert sorted(found) == sorted(IDS)
    return found


@pytest.fixture(scope="session")
def ml_images(ml_instances: dict[str, Instance], repo_mirror: Path, docker_image: str) -> dict[str, str]:
    """instance_id -> its docker image, by the code path of `prepare images --build` (docker only)."""
    from anyswe.plan import make_plan
    from anyswe.prepare.images import prepare_images_async
    from anyswe.spec import load_spec

    plan = make_plan(load_spec(SPEC, ["matrix.providers=[docker]"]))
    report = asyncio.run(prepare_images_async(plan, jobs=1, build=True, repo_mirror=repo_mirror, progress=False))
    assert not report.failed, "\n".join(f"{j.ref}: {j.error}" for j in report.failed)
    return {i: sb.official_image(i) for i in ml_instances}


@pytest.fixture(scope="session")
def ml_by_hand(ml_images: dict[str, str], ml_instances: dict[str, Instance]) -> dict[str, dict[str, ByHandRun]]:
    """instance_id -> {"gold": run, "empty": run}: swebench's procedure with plain docker."""
    return gold_and_empty_by_hand(ml_images, ml_instances)


@pytest.fixture(scope="session")
def ml_verdicts(
    ml_by_hand: dict[str, dict[str, ByHandRun]], ml_instances: dict[str, Instance]
) -> dict[str, dict[str, dict[str, Any]]]:
    """instance_id -> {"gold"|"empty": {"resolved", "tests_status"}} by swebench's ``get_eval_report``."""
    return by_hand_verdicts_of(ml_by_hand, ml_instances)
