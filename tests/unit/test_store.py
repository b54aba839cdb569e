"""The run store: durable appends, torn lines, resume bookkeeping, one writer, aggregates."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from anyswe.agents import ExitReason
from anyswe.errors import ResultsError
from anyswe.execute.task import mask_sample
from anyswe.results.store import RunStore, aggregate, read_rows


def row(key: str, **kw: object) -> dict[str, object]:
    return {"key": key, "cell": "c", "resolved": False, "reward": 0.0, "mask_sample": False, "error_kind": None, **kw}


def test_append_resume_and_retry_bookkeeping(tmp_path: Path) -> None:
    with RunStore(tmp_path) as store:
        store.append(row("a", resolved=True, reward=1.0))
        store.append(row("b", error_kind="infra", mask_sample=True))
        store.append(row("c", error_kind="agent"))
        assert store.done_keys() == {"a", "c"}  # infra failures run again
        store.append(row("b"))
        assert store.done_keys() == {"a", "b", "c"}
        assert store.attempts() == {"a": 1, "b": 2, "c": 1}
    assert [r["key"] for r in read_rows(tmp_path / "results.jsonl")] == ["a", "b", "c", "b"]


def test_torn_last_line_is_cut_on_open(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(row("a")) + "\n" + '{"key": "b", "cell"')
    assert [r["key"] for r in read_rows(path)] == ["a"]
    with RunStore(tmp_path) as store:
        store.append(row("c"))
    assert [r["key"] for r in read_rows(path)] == ["a", "c"]
    assert path.read_text().count("\n") == 2


def test_corrupt_middle_line_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "results.jsonl").write_text('{"key": "a"}\nnot json\n{"key": "b"}\n')
    with pytest.raises(ResultsError, match=r"results\.jsonl:2"):
        read_rows(tmp_path / "results.jsonl")


def test_one_writer_at_a_time(tmp_path: Path) -> None:
    with RunStore(tmp_path), pytest.raises(ResultsError, match="another anyswe process"), RunStore(tmp_path):
        pass


def test_aggregate_matches_statistics() -> None:
    rows = [row(str(i), reward=float(i % 2), time_agent=float(i), mask_sample=i == 3) for i in range(5)]
    agg = aggregate(rows)
    assert agg["mean/reward"] == pytest.approx(0.4)
    assert agg["mean/mask_sample"] == pytest.approx(0.2)
    assert agg["median/time_agent"] == 2.0 and agg["min/time_agent"] == 0.0 and agg["max/time_agent"] == 4.0
    assert agg["std/time_agent"] == pytest.approx(statistics.stdev([0, 1, 2, 3, 4]))


@pytest.mark.parametrize(
    ("kw", "masked"),
    [
        ({"error_kind": None, "agent_timed_out": False, "resolved": True, "exit_reason": ExitReason.SUBMITTED}, False),
        ({"error_kind": None, "agent_timed_out": False, "resolved": False, "exit_reason": ExitReason.SUBMITTED}, False),
        ({"error_kind": "agent", "agent_timed_out": False, "resolved": False, "exit_reason": ExitReason.ERROR}, False),
        (
            {"error_kind": "infra", "agent_timed_out": False, "resolved": False, "exit_reason": ExitReason.SUBMITTED},
            True,
        ),
        (
            {"error_kind": "grading", "agent_timed_out": False, "resolved": False, "exit_reason": ExitReason.SUBMITTED},
            True,
        ),
        ({"error_kind": None, "agent_timed_out": True, "resolved": False, "exit_reason": ExitReason.TIMEOUT}, True),
        (
            {"error_kind": None, "agent_timed_out": False, "resolved": True, "exit_reason": ExitReason.MAX_ITERATIONS},
            True,
        ),
        (
            {"error_kind": None, "agent_timed_out": False, "resolved": True, "exit_reason": ExitReason.CONTEXT_WINDOW},
            True,
        ),
        (
            {"error_kind": None, "agent_timed_out": False, "resolved": False, "exit_reason": ExitReason.MAX_ITERATIONS},
            False,
        ),
    ],
)
def test_masking_rules(kw: dict[str, object], masked: bool) -> None:
    assert mask_sample(**kw) is masked  # type: ignore[arg-type]
