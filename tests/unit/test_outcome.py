"""An attempt's Outcome (execute/outcome.py): each stage appends its failure with its source, the tests'
verdict is never overwritten, and the row written from it is the one decide() gives for its facts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from anyswe.agents import ExitReason
from anyswe.execute.decide import Facts, decide, facts_of
from anyswe.execute.outcome import Exit, Outcome
from anyswe.execute.record import FIELDS, Record
from anyswe.results.schema import SCHEMA_VERSION, Failure, FailureSource, TaskResult, parse_row
from anyswe.results.store import read_results

E = ExitReason
RECORD = {
    "key": "0123456789abcdef__demo__calc-1",
    "cell": "gold.none.docker",
    "agent": "gold",
    "provider": "docker",
    "instance_id": "demo__calc-1",
    "attempt": 1,
    "model_patch": "diff --git a/x b/x\n",
    "patch_exists": True,
    "patch_applied": True,
}


def _resolved(**kw: Any) -> Outcome:
    return Outcome(record=Record.of(RECORD), tests_resolved=True, exit=Exit(E.SUBMITTED, by="agent"), **kw)


# Each source, the kind it states: what the task's phases, the grant, the relay on a remote node, the
# executor for a dead node, the reading of the trajectory and the recorder find.
SOURCES: list[tuple[FailureSource, str]] = [
    ("task", "agent"),
    ("task", "grading"),
    ("grant", "infra"),
    ("grant", "agent"),
    ("relay", "infra"),
    ("node", "infra"),
    ("trajectory", "infra"),
    ("recorder", "internal"),
]


@pytest.mark.parametrize(("source", "kind"), SOURCES)
def test_a_failure_from_each_source_keeps_the_tests_verdict_and_decides_the_row(source: str, kind: str) -> None:
    outcome = _resolved().failed(Failure(kind=kind, source=source, message=f"{source} failed"))  # type: ignore[arg-type]
    assert outcome.tests_resolved is True
    row = outcome.row()
    expected = decide(Facts(True, kind, False, E.SUBMITTED))  # type: ignore[arg-type]
    assert (row.resolved, row.reward, row.mask_sample, row.mask_reason) == tuple(expected.fields().values())
    assert row.tests_resolved is True  # the tests said so, whatever the row decided
    assert (row.error_kind, row.error) == (kind, f"{source} failed")
    assert [(f.kind, f.source) for f in row.failures] == [(kind, source)]
    assert decide(facts_of(row)) == expected  # the row alone gives the same decision
    # An attempt the recorder could not write keeps no patch (nothing of it is beside the row).
    assert row.model_patch == ("" if source == "recorder" else RECORD["model_patch"])


def test_a_later_untrusted_failure_overrules_and_every_failure_stays_listed() -> None:
    outcome = _resolved().failed(Failure(kind="agent", source="task", message="its patch is over the cap"))
    outcome = outcome.failed(Failure(kind="infra", source="relay", message="3 calls never reached the gateway"))
    row = outcome.row()
    assert (row.error_kind, row.error, row.mask_reason) == ("infra", "3 calls never reached the gateway", "infra")
    assert [f.source for f in row.failures] == ["task", "relay"]
    # The agent's own failures are joined, first to last.
    two = _resolved().failed(Failure(kind="agent", source="task", message="crashed"))
    two = two.failed(Failure(kind="agent", source="task", message="the patch does not apply"))
    assert two.row().error == "crashed; the patch does not apply"
    assert two.row().resolved is True  # the agent's failures count as the tests said


def test_a_permanent_failure_is_reported_as_one() -> None:
    row = _resolved().failed(Failure(kind="infra", source="task", message="no image", permanent=True)).row()
    assert row.error_permanent is True and row.retryable is True


def test_the_grant_settles_the_usage_once_and_may_end_the_exit() -> None:
    capped = _resolved().settled(
        {"model_calls": 7, "input_tokens": 100, "cost_usd": 0.25},
        Exit(E.MAX_ITERATIONS, by="gateway", detail="turn cap reached: turns 7"),
    )
    row = capped.row()
    assert (row.model_calls, row.input_tokens, row.cost_usd) == (7, 100, 0.25)
    # The gateway's cap ended it: the same verdict, now an accidental pass; the cap is the row's note.
    assert (row.resolved, row.mask_reason, row.exit_by, row.error_kind) == (True, "forced_stop", "gateway", None)
    assert row.error == "turn cap reached: turns 7"
    with pytest.raises(ValueError, match="settled once"):
        capped.settled({"model_calls": 8})


def test_off_policy_masks_only_with_the_setting_on() -> None:
    broken = _resolved().settled({"token_prefix_chain": False}).row()
    assert (broken.mask_sample, broken.mask_reason) == (False, None)  # the setting is off: a fact, no mask
    masked = _resolved().settled({"token_prefix_chain": False, "mask_off_policy": True}).row()
    assert (masked.resolved, masked.mask_sample, masked.mask_reason) == (True, True, "off_policy")
    kept = _resolved().settled({"token_prefix_chain": True, "mask_off_policy": True}).row()
    assert kept.mask_sample is False


def test_the_record_holds_no_decided_field_and_a_wrong_fact_fails_when_the_row_is_written() -> None:
    # The record's typed groups hold the row's facts, none of what the outcome decides.
    assert FIELDS.isdisjoint({"resolved", "reward", "mask_sample", "error_kind", "exit_reason", "tests_resolved"})
    assert FIELDS | set(TaskResult.model_fields) == set(TaskResult.model_fields)
    # Each group restates its row fields: the same type and default as the row's, or the row and the
    # record drift apart.
    import dataclasses
    import typing

    from anyswe.execute import record as rec

    for group in (rec.Identity, rec.Provenance, rec.PatchFacts, rec.Limits, rec.Timings):
        hints = typing.get_type_hints(group)
        for f in dataclasses.fields(group):
            row_field = TaskResult.model_fields[f.name]
            assert hints[f.name] == row_field.annotation, f.name
            if f.default is not dataclasses.MISSING:
                assert f.default == row_field.default, f.name
    assert Record.of({**RECORD, "resolved": True}).fields() == Record.of(RECORD).fields()
    with pytest.raises(ValidationError, match="sample"):
        Outcome(record=Record.of({**RECORD, "sample": "first"}), tests_resolved=False).row()
    with pytest.raises(ValidationError, match="kind"):
        Failure(kind="bad", source="task", message="x")  # type: ignore[arg-type]


def test_a_row_gives_back_the_outcome_it_was_written_from() -> None:
    outcome = _resolved().settled({"model_calls": 2}).failed(Failure(kind="infra", source="node", message="gone"))
    row = outcome.row()
    assert Outcome.of_row(row).row() == row
    assert isinstance(row, TaskResult)


def test_rows_of_schema_8_read_with_their_verdict_and_their_one_failure() -> None:
    """A real run's results.jsonl written by schema 8 (gold and noop on docker and on a provider whose image
    does not exist: four permanent infra errors), read by this version."""
    rows = read_results(Path(__file__).parent.parent / "fixtures" / "results_schema8" / "results.jsonl")
    assert len(rows) == 8 and {r.schema_version for r in rows} == {SCHEMA_VERSION}
    for row in rows:
        assert row.tests_resolved == row.resolved
        if row.error_kind is None:
            assert row.failures == []
        else:
            assert row.failures == [Failure(kind="infra", source=None, message=row.error or "", permanent=True)]
            assert row.mask_reason == "infra" and row.error_permanent
    assert sorted((r.agent, r.provider, r.resolved) for r in rows if r.provider == "docker") == [
        ("gold", "docker", True),
        ("gold", "docker", True),
        ("noop", "docker", False),
        ("noop", "docker", False),
    ]
    again = parse_row(rows[0].model_dump(mode="json"), "results.jsonl:1")
    assert again == rows[0]


def test_a_rollout_and_gyms_response_are_views_of_the_row() -> None:
    """Rollout holds the row, not copies of its fields: masking a group replaces the row and every view follows."""
    from anyswe.execute.decide import mask_group
    from anyswe.execute.sample import Rollout
    from anyswe.gym import gym_response

    ok = Rollout(result=_resolved().settled({"model_calls": 3, "input_tokens": 9}).row())
    lost = Rollout(result=_resolved().failed(Failure(kind="infra", source="node", message="gone")).row())
    assert (ok.reward, ok.resolved, ok.mask_sample, ok.usage.model_calls, ok.patch) == (
        1.0,
        True,
        False,
        3,
        RECORD["model_patch"],
    )
    dumped = ok.model_dump(mode="json")
    assert dumped["reward"] == 1.0 and dumped["usage"]["input_tokens"] == 9 and dumped["result"]["tests_resolved"]
    grouped = [
        r.model_copy(update={"result": res})
        for r, res in zip([ok, lost], mask_group([ok.result, lost.result]), strict=True)
    ]
    assert [(r.mask_sample, r.mask_reason, r.resolved) for r in grouped] == [
        (True, "group", True),
        (True, "infra", False),
    ]
    response = gym_response({"responses_create_params": {"model": "m"}}, grouped[0])
    assert (response["reward"], response["mask_sample"], response["resolved"]) == (1.0, True, True)
