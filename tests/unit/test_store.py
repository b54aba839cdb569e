"""The run store: durable appends, torn lines, resume bookkeeping, one writer, aggregates."""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path

import pytest

from anyswe.errors import ResultsError
from anyswe.results.schema import SCHEMA_VERSION, TaskResult, polars_schema, results_frame
from anyswe.results.store import RunStore, aggregate, read_results, read_rows


def key(instance_id: str) -> str:
    """A task key of ``instance_id`` (plan.task_key's shape: 16 hex digits, ``__``, the instance id)."""
    return f"0123456789abcdef__{instance_id}"


def row(instance_id: str, **kw: object) -> dict[str, object]:
    return {"key": key(instance_id), "cell": "c", "agent": "a", "provider": "p", "instance_id": instance_id, **kw}


def result(instance_id: str, **kw: object) -> TaskResult:
    return TaskResult.model_validate(row(instance_id, **kw))


def test_append_resume_and_retry_bookkeeping(tmp_path: Path) -> None:
    with RunStore(tmp_path) as store:
        store.append(result("a", resolved=True, reward=1.0))
        store.append(result("b", error_kind="infra", mask_sample=True))
        store.append(result("c", error_kind="agent"))
        assert store.done_keys() == {key("a"), key("c")}  # infra failures run again
        store.append(result("b"))
        assert store.done_keys() == {key("a"), key("b"), key("c")}
        assert store.attempts() == {key("a"): 1, key("b"): 2, key("c"): 1}
    assert [r["instance_id"] for r in read_rows(tmp_path / "results.jsonl")] == ["a", "b", "c", "b"]


def test_torn_last_line_is_cut_on_open(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(row("a")) + "\n" + '{"key": "b", "cell"')
    assert [r["instance_id"] for r in read_rows(path)] == ["a"]
    with RunStore(tmp_path) as store:
        store.append(result("c"))
    assert [r["instance_id"] for r in read_rows(path)] == ["a", "c"]
    assert path.read_text().count("\n") == 2


def test_corrupt_middle_line_is_an_error(tmp_path: Path) -> None:
    good = json.dumps(row("a"))
    (tmp_path / "results.jsonl").write_text(f"{good}\nnot json\n{good}\n")
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


def test_rows_are_task_results_and_old_rows_migrate(tmp_path: Path) -> None:
    """A row written before TaskResult (no schema_version, free-form agent_* numbers) still loads."""
    v1 = row("old", resolved=True, reward=1.0, exit_reason="submitted", agent_steps=3.0, time_total=1.5)
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(v1) + "\n" + result("new").model_dump_json() + "\n")
    old, new = read_results(path)
    assert (old.schema_version, old.resolved, old.exit_reason) == (SCHEMA_VERSION, True, "submitted")
    assert old.time_total == 1.5
    assert new.key == key("new") and new.model_calls == 0 and new.cost_usd is None
    # Every written line is a valid TaskResult with the current schema version.
    with RunStore(tmp_path) as store:
        store.append(result("x", input_tokens=10, cost_usd=0.5))
    last = json.loads(path.read_text().splitlines()[-1])
    assert last["schema_version"] == SCHEMA_VERSION and TaskResult.model_validate(last).input_tokens == 10


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ({**row("a"), "schema_version": 99}, "schema_version 99 is not one this anyswe reads"),
        ({**row("a"), "resolved": "maybe"}, "field 'resolved'"),
        ({k: v for k, v in row("a").items() if k != "cell"}, "field 'cell': Field required"),
        ({**row("a"), "schema_version": 2, "surprise": 1}, "field 'surprise'"),
    ],
)
def test_bad_rows_name_file_line_and_field(tmp_path: Path, line: dict[str, object], message: str) -> None:
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(row("ok")) + "\n" + json.dumps(line) + "\n")
    with pytest.raises(ResultsError, match=r"results\.jsonl:2: ") as info:
        read_results(path)
    assert message in str(info.value)


def test_polars_schema_comes_from_the_model() -> None:
    import polars as pl

    schema = polars_schema()
    assert list(schema) == list(TaskResult.model_fields)
    assert (schema["resolved"], schema["input_tokens"], schema["cost_usd"], schema["model"]) == (
        pl.Boolean,
        pl.Int64,
        pl.Float64,
        pl.Utf8,
    )
    # All-null columns keep their types (polars would guess Null from the data alone).
    frame = results_frame([result("a"), result("b")])
    assert frame.schema["cost_usd"] == pl.Float64 and frame.schema["exit_reason"] == pl.Utf8
    assert frame.height == 2 and results_frame([]).width == len(schema)


def test_a_task_whose_output_cannot_be_written_is_recorded_as_its_own_error(tmp_path: Path) -> None:
    """A lone surrogate in a patch (a replayed prediction, say) must not abort the run or lose the task."""
    from anyswe.execute.outcome import Outcome
    from anyswe.execute.session import record
    from anyswe.execute.unit import TaskOutput

    bad = result("a", model_patch="diff \ud800", tests_resolved=True, resolved=True, reward=1.0)
    with RunStore(tmp_path) as store:
        recorded = record(store, TaskOutput(Outcome.of_row(bad), {"patch.diff": "diff \ud800"})).result
        # A verdict without its files is no verdict: the row (and what the driver counts) says so.
        assert (recorded.resolved, recorded.reward, recorded.error_kind) == (False, 0.0, "internal")
        record(store, TaskOutput(Outcome.of_row(result("b")), {"patch.diff": "fine"}))
        assert store.done_keys() == {key("b")}  # the failed one runs again on the next apply
    first, second = read_results(tmp_path / "results.jsonl")
    assert (first.key, first.error_kind, first.mask_sample, first.model_patch) == (key("a"), "internal", True, "")
    assert (first.resolved, first.reward) == (False, 0.0)
    assert "recording the task's results failed: UnicodeEncodeError" in (first.error or "")
    assert second.key == key("b") and (tmp_path / "tasks" / key("b") / "patch.diff").read_text() == "fine"


def test_a_surrogate_in_reported_text_is_replaced_and_the_sample_kept(tmp_path: Path) -> None:
    """Issue 31, item 4: an error message or a log holding a surrogate code point (JSON an agent or a
    model wrote can say one) is written with U+FFFD in its place, not lost as an internal error; the
    row the caller gets back is the row written, and it makes a table."""
    from anyswe.execute.outcome import Exit, Outcome
    from anyswe.execute.session import record
    from anyswe.execute.unit import TaskOutput

    said = result("a", flags=["x\udfff"], tests_resolved=True, resolved=True, reward=1.0)
    # What an agent said, with a surrogate: the note of the cap that ended it.
    outcome = dataclasses.replace(Outcome.of_row(said), exit=Exit(detail="agent said \ud800 and \ud83d\ude00"))
    with RunStore(tmp_path) as store:
        recorded = record(store, TaskOutput(outcome, {"agent.log": "log \udc80", "patch.diff": "diff"})).result
    (row,) = read_results(tmp_path / "results.jsonl")
    assert row == recorded and (row.error_kind, row.resolved, row.reward) == (None, True, 1.0)
    assert (row.error, row.flags) == ("agent said \ufffd and \U0001f600", ["x\ufffd"])
    assert (tmp_path / "tasks" / row.key / "agent.log").read_text() == "log \ufffd"
    assert results_frame([row]).height == 1


@pytest.mark.parametrize("key", ["../x", "..", "a/b", "/etc", ".lock", ""])
def test_task_dir_refuses_a_key_that_leads_outside_tasks(tmp_path: Path, key: str) -> None:
    with RunStore(tmp_path / "run") as store, pytest.raises(ResultsError, match="cannot name a directory"):
        store.task_dir(key)
    assert not (tmp_path / "x").exists() and not (tmp_path / "run" / "tasks").exists()


def test_task_dir_refuses_a_planted_link_out_of_tasks(tmp_path: Path) -> None:
    (tmp_path / "run" / "tasks").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "run" / "tasks" / "k__a-1").symlink_to(tmp_path / "elsewhere")
    with RunStore(tmp_path / "run") as store, pytest.raises(ResultsError, match="a link out of"):
        store.task_dir("k__a-1")
    assert store.task_dir("k__a-2") == tmp_path / "run" / "tasks" / "k__a-2"
