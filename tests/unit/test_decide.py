"""The reward and mask table of execute/decide.py, case by case (issue 23). How every later stage
reaches it, through the attempt's Outcome, is tests/unit/test_outcome.py."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from anyswe.agents import ExitReason
from anyswe.execute.decide import Decision, Facts, MaskReason, decide, mask_group
from anyswe.results.schema import TaskResult, parse_row

E = ExitReason

# (facts, expected decision): one row per line of the module's table, and its neighbours.
TABLE: list[tuple[Facts, Decision]] = [
    # The agent submitted; the tests decide.
    (Facts(True, None, False, E.SUBMITTED), Decision(True, 1.0, False, None)),
    (Facts(False, None, False, E.SUBMITTED), Decision(False, 0.0, False, None)),
    # Its own failure counts: a crash, a capture it broke, a patch over the cap (graded as it is).
    (Facts(False, "agent", False, E.ERROR), Decision(False, 0.0, False, None)),
    (Facts(True, "agent", False, E.ERROR), Decision(True, 1.0, False, None)),
    # Untrusted kinds: never resolved, whatever the tests printed; masked with their kind.
    (Facts(True, "infra", False, E.SUBMITTED), Decision(False, 0.0, True, MaskReason.INFRA)),
    (Facts(False, "infra", False, None), Decision(False, 0.0, True, MaskReason.INFRA)),
    (Facts(True, "grading", False, E.SUBMITTED), Decision(False, 0.0, True, MaskReason.GRADING)),
    (Facts(False, "internal", True, E.TIMEOUT), Decision(False, 0.0, True, MaskReason.INTERNAL)),
    # The agent timed out: masked whatever the verdict (the host cut it short).
    (Facts(False, None, True, E.TIMEOUT), Decision(False, 0.0, True, MaskReason.AGENT_TIMEOUT)),
    (Facts(True, None, True, E.TIMEOUT), Decision(True, 1.0, True, MaskReason.AGENT_TIMEOUT)),
    # Token ids off the prefix chain (compaction, a retry) with mask_off_policy on: masked either way.
    (Facts(True, None, False, E.SUBMITTED, off_policy=True), Decision(True, 1.0, True, MaskReason.OFF_POLICY)),
    (Facts(False, None, False, E.SUBMITTED, off_policy=True), Decision(False, 0.0, True, MaskReason.OFF_POLICY)),
    (Facts(False, "infra", False, None, off_policy=True), Decision(False, 0.0, True, MaskReason.INFRA)),
    # Gym's accidental-pass mask: resolved although stopped (luck, not a solution) ...
    (Facts(True, None, False, E.MAX_ITERATIONS), Decision(True, 1.0, True, MaskReason.FORCED_STOP)),
    (Facts(True, None, False, E.CONTEXT_WINDOW), Decision(True, 1.0, True, MaskReason.FORCED_STOP)),
    (Facts(True, None, False, E.BUDGET), Decision(True, 1.0, True, MaskReason.FORCED_STOP)),
    # ... while running out unresolved is the agent's doing: a true negative.
    (Facts(False, None, False, E.MAX_ITERATIONS), Decision(False, 0.0, False, None)),
    (Facts(False, None, False, E.CONTEXT_WINDOW), Decision(False, 0.0, False, None)),
    (Facts(False, None, False, E.BUDGET), Decision(False, 0.0, False, None)),
]


@pytest.mark.parametrize(("facts", "expected"), TABLE, ids=[repr(f) for f, _ in TABLE])
def test_the_table(facts: Facts, expected: Decision) -> None:
    assert decide(facts) == expected


def test_every_combination_keeps_the_invariants() -> None:
    """Over every combination of facts: an untrusted row is never resolved, the reward is the
    verdict, and a mask always has its reason."""
    kinds = [None, "agent", "infra", "grading", "internal"]
    product = itertools.product([True, False], kinds, [True, False], [*E, None], [True, False])
    for resolved, kind, timed_out, reason, off in product:
        d = decide(Facts(resolved, kind, timed_out, reason, off))  # type: ignore[arg-type]
        assert d.reward == (1.0 if d.resolved else 0.0)
        assert d.mask_sample == (d.mask_reason is not None)
        if kind in ("infra", "grading", "internal"):
            assert not d.resolved and d.mask_reason == MaskReason(kind)
        else:
            assert d.resolved == resolved


def _row(**kw: Any) -> TaskResult:
    base = {"key": "k", "cell": "c", "agent": "a", "provider": "docker", "instance_id": "i"}
    facts = Facts(
        kw.pop("verdict", False), kw.get("error_kind"), kw.get("agent_timed_out", False), kw.get("exit_reason")
    )
    return TaskResult.model_validate({**base, **kw, **decide(facts).fields()})


def test_old_rows_get_the_reason_their_facts_give() -> None:
    """Rows of schema 6 had a mask and no reason: reading them gives the reason decide() gives."""
    base = {
        "schema_version": 6,
        "key": "0123456789abcdef__i",
        "cell": "c",
        "agent": "a",
        "provider": "p",
        "instance_id": "i",
    }
    infra = parse_row({**base, "error_kind": "infra", "mask_sample": True}, "results.jsonl:1")
    assert infra.mask_reason == "infra"
    lucky = {**base, "resolved": True, "reward": 1.0, "exit_reason": "max_iterations", "mask_sample": True}
    assert parse_row(lucky, "results.jsonl:2").mask_reason == "forced_stop"
    assert parse_row({**base, "mask_sample": False}, "results.jsonl:3").mask_reason is None


def test_the_prefix_chain_follows_each_calls_tokens() -> None:
    from anyswe.gateway.grants import Grant

    g = Grant(key="k", model="m", upstream=None)  # type: ignore[arg-type]
    g.chain(None)
    assert g.prefix_chain is None  # no token ids yet: nothing to say
    g.chain({"prompt_token_ids": [1, 2], "generation_token_ids": [3]})
    g.chain({"prompt_token_ids": [1, 2, 3, 9, 9], "generation_token_ids": [4]})
    assert g.prefix_chain is True
    g.chain({"prompt_token_ids": [1, 2, 3, 9], "generation_token_ids": [5]})  # history cut: compaction
    assert g.prefix_chain is False
    g.chain({"prompt_token_ids": [1, 2, 3, 9, 5], "generation_token_ids": []})
    assert g.prefix_chain is False  # once off-policy, the rollout stays so
    h = Grant(key="k", model="m", upstream=None)  # type: ignore[arg-type]
    h.chain({"prompt_token_ids": [1], "generation_token_ids": [2]})
    h.chain(None)  # a call without token ids breaks a chain that had them
    assert h.prefix_chain is False


def test_a_group_with_one_masked_rollout_is_masked_whole() -> None:
    ok = _row(verdict=True, exit_reason=E.SUBMITTED)
    lost = _row(error_kind="infra")
    lucky = _row(verdict=True, exit_reason=E.MAX_ITERATIONS)
    grouped = mask_group([ok, lost, ok])
    assert [(r.mask_sample, r.mask_reason) for r in grouped] == [(True, "group"), (True, "infra"), (True, "group")]
    assert [r.resolved for r in grouped] == [True, False, True]  # the verdicts stay the harness's
    assert mask_group([ok, ok]) == [ok, ok]
    assert mask_group([lucky, ok])[1].mask_reason == "group"
