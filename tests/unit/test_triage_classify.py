"""The triage's classification (anyswe/execute/triage.py) case by case, on hand-made grades; the real
runtimes and planted flips are in tests/e2e/test_triage.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from anyswe.errors import ResultsError
from anyswe.execute.triage import Flip, GradeStore, Triage, _sha, classify, find_flips, flaky_instances

FIX, OTHER = "diff --git a/x.py b/x.py\n+fix\n", "diff --git a/x.py b/x.py\n+other\n"


def flip(patch_b: str = FIX, resolved_a: bool = True, resolved_b: bool = False) -> Flip:
    return Flip(
        "i-1", 0, "a.none.docker", "a.none.apptainer", "docker", "apptainer", FIX, patch_b, resolved_a, resolved_b
    )


def grade(patch: str, provider: str, resolved: bool | None, rep: int = 0, **tests: str) -> dict[str, Any]:
    row: dict[str, Any] = {"instance_id": "i-1", "patch": _sha(patch), "provider": provider, "rep": rep}
    if resolved is None:
        return row | {"resolved": None, "error": "SandboxStartError: boom"}
    failures = {t: f"AssertionError in {t}" for t, s in tests.items() if s == "fail"}
    return row | {"resolved": resolved, "tests": tests, "failures": failures, "error": None}


def test_a_verdict_that_varies_on_one_backend_is_flaky_and_names_the_tests() -> None:
    grades = [
        grade(FIX, "docker", True, 0, t1="pass", t2="pass"),
        grade(FIX, "docker", False, 1, t1="fail", t2="pass"),
        grade(FIX, "apptainer", False, 0, t1="fail", t2="pass"),
        grade(FIX, "apptainer", False, 1, t1="fail", t2="pass"),
    ]
    found = classify(flip(), grades)
    assert (found.kind, found.tests) == ("flaky", ["t1"])
    assert found.verdicts[f"{_sha(FIX)}@docker"] == [True, True, False]  # the recorded verdict first


def test_the_recorded_verdict_counts_a_flip_that_does_not_come_back_is_flaky() -> None:
    grades = [grade(FIX, p, True, r, t1="pass") for p in ("docker", "apptainer") for r in range(3)]
    assert classify(flip(), grades).kind == "flaky"


def test_stable_on_each_backend_and_different_between_is_backend_systematic() -> None:
    grades = [grade(FIX, "docker", True, r, t1="pass", t2="pass") for r in range(3)]
    grades += [grade(FIX, "apptainer", False, r, t1="fail", t2="pass") for r in range(3)]
    found = classify(flip(), grades)
    assert (found.kind, found.tests, found.detail) == (
        "backend-systematic",
        ["t1"],
        {"t1": "apptainer: AssertionError in t1"},
    )


def test_two_patches_each_stable_everywhere_is_agent_variance() -> None:
    grades = [grade(FIX, p, True, r, t1="pass") for p in ("docker", "apptainer") for r in range(2)]
    grades += [grade(OTHER, p, False, r, t1="fail") for p in ("docker", "apptainer") for r in range(2)]
    assert classify(flip(patch_b=OTHER), grades).kind == "agent-variance"


def test_a_patch_without_a_verdict_on_a_backend_is_undetermined() -> None:
    # OTHER was recorded on apptainer only, and its one grade on docker failed to run.
    grades = [grade(FIX, p, True, r, t1="pass") for p in ("docker", "apptainer") for r in range(2)]
    grades += [grade(OTHER, "apptainer", False, 0, t1="fail"), grade(OTHER, "docker", None)]
    found = classify(flip(patch_b=OTHER), grades)
    assert found.kind == "undetermined" and found.detail == {"grading error": "SandboxStartError: boom"}


def test_the_grade_store_resumes_past_a_torn_line_and_has_one_writer(tmp_path: Path) -> None:
    store = GradeStore(tmp_path / "triage")
    store.append(grade(FIX, "docker", True))
    with open(store.path, "ab") as fh:
        fh.write(b'{"instance_id": "i-1", "pa')  # a crash mid-write
    with pytest.raises(ResultsError, match="being triaged by another process"):
        GradeStore(tmp_path / "triage")
    store.close()
    again = GradeStore(tmp_path / "triage")
    assert [g["resolved"] for g in again.rows()] == [True]
    # The next grade starts a line of its own: appended to the torn text it would be lost with it.
    again.append(grade(FIX, "apptainer", False))
    assert [g["resolved"] for g in again.rows()] == [True, False]
    again.close()


def test_a_failed_grade_first_does_not_hide_the_backend_difference() -> None:
    # A triage run again after an infrastructure error: each side's first row is a failed grade.
    grades = [grade(FIX, p, None) for p in ("docker", "apptainer")]
    grades += [grade(FIX, "docker", True, r, t1="pass") for r in (1, 2)]
    grades += [grade(FIX, "apptainer", False, r, t1="fail") for r in (1, 2)]
    found = classify(flip(), grades)
    assert (found.kind, found.tests, found.detail) == (
        "backend-systematic",
        ["t1"],
        {"t1": "apptainer: AssertionError in t1"},
    )


def test_a_missing_or_foreign_triage_table_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ResultsError, match="no triage table"):
        flaky_instances(tmp_path)
    (tmp_path / "t.json").write_text('{"not": "a list"}')
    with pytest.raises(ResultsError, match="not a triage table"):
        flaky_instances(tmp_path / "t.json")


def test_flips_are_found_on_the_harness_verdicts_and_say_which_side_rl_masks() -> None:
    """Issue 31, 6: a side whose agent timed out has its tests' verdict, so it can flip; a side with
    an infra error has none. The finding names the RL-masked side (no flip of the RL rate)."""
    import polars as pl

    def row(provider: str, iid: str, resolved: bool, error: str | None = None, mask: str | None = None) -> dict:
        return {
            "key": f"{provider}-{iid}", "cell": f"a.none.{provider}", "agent": "a", "model": None,
            "provider": provider, "provider_type": provider, "instance_id": iid, "sample": 0,
            "resolved": resolved, "mask_sample": mask is not None, "mask_reason": mask, "error_kind": error,
            "model_patch": FIX,
        }  # fmt: skip

    tasks = pl.DataFrame(
        [
            row("docker", "i-1", True),
            row("apptainer", "i-1", False, mask="agent_timeout"),  # a flip, masked for RL on B
            row("docker", "i-2", True),
            row("apptainer", "i-2", False, error="infra", mask="infra"),  # no verdict on B: no flip
            row("docker", "i-3", False),
            row("apptainer", "i-3", True),  # a plain flip
        ],
        schema_overrides={"model": pl.String, "mask_reason": pl.String, "error_kind": pl.String},
    )
    flips = find_flips(tasks)
    assert [(f.instance_id, f.rl_masked()) for f in flips] == [
        ("i-1", {"a.none.apptainer": "agent_timeout"}),
        ("i-3", {}),
    ]
    found = Triage(Path("."), [classify(f, []) for f in flips])
    assert [r["rl_masked"] for r in found.rows()] == ["a.none.apptainer: agent_timeout", ""]
    assert "rl_masked" not in Triage(Path("."), [classify(flips[1], [])]).rows()[0]
