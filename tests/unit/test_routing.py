"""Dataset names route to harnesses; unknown names are clear errors; R2E-Gym grades natively."""

from __future__ import annotations

import json

import pytest

from anyswe.datasets import Instance, route
from anyswe.datasets.hub import SWEBENCH_IMAGE
from anyswe.datasets.registry import split_name
from anyswe.errors import DatasetError
from anyswe.grading import get_harness, harness_for, harness_names, route_instance
from anyswe.grading.r2e import r2e_resolved


@pytest.mark.parametrize(
    ("name", "dataset", "harness"),
    [
        ("princeton-nlp/SWE-bench_Verified", "swe-bench-verified", "swebench"),
        ("SWE-bench/SWE-bench_Verified", "swe-bench-verified", "swebench"),
        ("swe-bench/swe-bench_verified:test", "swe-bench-verified", "swebench"),
        ("SWE-BENCH/SWE-BENCH_VERIFIED[test]", "swe-bench-verified", "swebench"),
        ("princeton-nlp/SWE-bench_Lite@dev", "swe-bench-lite", "swebench"),
        ("princeton-nlp/SWE-bench", "swe-bench", "swebench"),
        ("SWE-bench/SWE-bench/test", "swe-bench", "swebench"),
        ("SWE-bench/SWE-bench_Multilingual", "swe-bench-multilingual", "swebench"),
        ("princeton-nlp/SWE-bench_Multimodal:dev", "swe-bench-multimodal", "swebench"),
        ("R2E-Gym/R2E-Gym-Lite", "r2e-gym", "r2e"),
        ("demo", "demo", "pytest"),
        ("DEMO", "demo", "pytest"),
    ],
)
def test_routing_table(name: str, dataset: str, harness: str) -> None:
    info = route(name)
    assert (info.name, info.harness) == (dataset, harness)
    assert harness in harness_names()
    get_harness(harness)


def test_unknown_dataset_lists_the_known() -> None:
    with pytest.raises(DatasetError) as info:
        route("princeton-nlp/SWE-bench_Verifeid")
    assert "swe-bench-verified" in str(info.value) and "r2e-gym" in str(info.value) and "path:" in str(info.value)


def test_split_suffix() -> None:
    assert split_name("SWE-bench/SWE-bench_Verified:test") == ("SWE-bench/SWE-bench_Verified", "test")
    assert split_name("SWE-bench/SWE-bench_Verified") == ("SWE-bench/SWE-bench_Verified", None)


def test_swebench_image_names() -> None:
    inst = Instance(
        instance_id="astropy__astropy-14539", repo="astropy/astropy", base_commit="x", test_patch="", FAIL_TO_PASS=[]
    )
    from anyswe.datasets import format_image

    assert format_image(SWEBENCH_IMAGE, inst) == "swebench/sweb.eval.x86_64.astropy_1776_astropy-14539:latest"


def test_routing_by_instance() -> None:
    base = {"base_commit": "x", "test_patch": "", "FAIL_TO_PASS": []}
    assert route_instance(Instance(instance_id="a", repo="django/django", **base)) == "swebench"
    mine = Instance(instance_id="b", repo="me/mine", **base)
    assert route_instance(mine) == "pytest"
    r2e = Instance(instance_id="c", repo="sympy", expected_output_json="{}", **base)
    assert route_instance(r2e) == "r2e"
    # One place decides: the spec's choice, else the dataset's; only `auto` routes per instance.
    assert harness_for(r2e, spec_harness=None, dataset_harness="auto") == "r2e"
    assert harness_for(r2e, spec_harness="pytest", dataset_harness="auto") == "pytest"
    assert harness_for(mine, spec_harness=None, dataset_harness="swebench") == "swebench"


LOG = """\
============================= test session starts ==============================
collected 3 items
=========================== short test summary info ============================
PASSED r2e_tests/test_1.py::TestA::test_ok
FAILED r2e_tests/test_1.py::TestA::test_bad - AssertionError: nope
ERROR r2e_tests/test_1.py::test_err - RuntimeError
"""


def test_r2e_native_grading() -> None:
    expected = {"TestA.test_ok": "PASSED", "TestA.test_bad": "FAILED", "test_err": "ERROR"}
    ok, parsed, _ = r2e_resolved(LOG, json.dumps(expected))
    assert ok and parsed == expected
    assert not r2e_resolved(LOG, json.dumps({**expected, "TestA.test_bad": "PASSED"}))[0]
    assert not r2e_resolved(LOG, json.dumps({**expected, "extra": "PASSED"}))[0]
    assert not r2e_resolved("no summary", json.dumps(expected))[0]
    colored = json.dumps({"\u001b[1mTestA.test_ok\u001b[0m": "PASSED", "TestA.test_bad": "FAILED", "test_err": "ERROR"})
    assert r2e_resolved(LOG, colored)[0]
    row = Instance(
        instance_id="r",
        repo="sympy",
        base_commit="x",
        test_patch="",
        FAIL_TO_PASS=[],
        expected_output_json=json.dumps(expected),
    )
    verdict = get_harness("r2e").grade_log(row, LOG)
    assert verdict.resolved is True and verdict.tests_status["EXPECTED"]["failure"] == []
