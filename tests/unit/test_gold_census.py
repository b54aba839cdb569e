"""The gold census's buckets, from each pass's verdicts (the e2e census is tests/e2e/test_gold_check.py)."""

from __future__ import annotations

import pytest

from anyswe.prepare.gold import Census, GoldCheck, _exclusions

R, U, E = "resolved", "unresolved", "error: infra"


@pytest.mark.parametrize(
    ("gold", "empty", "bucket", "why"),
    [
        ([R, R, R], [U, U, U], "supported", None),
        ([R, U, R], [U, U, U], "flaky", "flaky: gold resolved 2/3, without the fix 0/3"),
        ([R, R, R], [U, R, U], "flaky", "flaky: gold resolved 3/3, without the fix 1/3"),
        ([U, U, U], [U, U, U], "broken", "gold patch does not resolve"),
        ([R, R, R], [R, R, R], "broken", "tests pass without the fix"),
        ([R, E, R], [U, U, U], "no-verdict", None),
        ([R, R, R], [U, U, E], "no-verdict", None),
        ([R], [], "no-verdict", None),
    ],
)
def test_a_bucket_follows_from_every_pass(gold: list[str], empty: list[str], bucket: str, why: str | None) -> None:
    census = Census(gold=gold, empty=empty)
    assert census.bucket == bucket
    if why is not None:
        assert census.why() == why


def test_flaky_and_broken_are_excluded_with_their_evidence_and_no_verdict_is_not(tmp_path) -> None:  # type: ignore[no-untyped-def]
    check = GoldCheck(run_dir=tmp_path, providers=["docker", "apptainer"], passes=3)
    check.census = {
        "a": {"docker": Census([R, R, R], [U, U, U]), "apptainer": Census([R, U, R], [U, U, U], ["t1"])},
        "b": {"docker": Census([R, E, R], [U, U, U]), "apptainer": Census([R, R, R], [U, U, U])},
        "c": {"docker": Census([U, U, U], [U, U, U], ["t2"]), "apptainer": Census([U, U, U], [U, U, U], ["t2"])},
    }
    found = _exclusions(check, "d")
    assert [e.instance_id for e in found.exclude] == ["a", "c"]
    a, c = found.exclude
    assert a.reason == "flaky: gold resolved 2/3, without the fix 0/3 on apptainer"
    assert a.census == {"docker": "supported", "apptainer": "flaky"} and a.failing == {"apptainer": ["t1"]}
    assert c.reason == "gold patch does not resolve on apptainer, docker"
    assert check.unchecked == [("b", "docker")] and found.passes == 3
