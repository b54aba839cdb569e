"""A patch over the cap is the agent's failure, recorded with the caps in force (issue 21)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from anyswe import _proc
from anyswe.agents import AgentOutcome, ExitReason
from anyswe.errors import SpecError
from anyswe.execute.classify import AgentRun, Trace, artifacts, classify
from anyswe.execute.task import patch_within_cap
from anyswe.execute.unit import WorkUnit, make_unit
from anyswe.grading import Verdict, get_harness
from anyswe.grading.ladder import empty_patch_verdict
from anyswe.plan import make_plan
from anyswe.results.schema import SCHEMA_VERSION, TaskResult, parse_row, polars_schema
from anyswe.spec import load_spec

SPEC = """\
name: s
dataset: {name: demo, limit: 1}
agents:
  gold: {type: gold}
providers:
  d: {type: docker}
"""


def unit(tmp_path: Path, *overrides: str) -> WorkUnit:
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC)
    plan = make_plan(load_spec(path, list(overrides)))
    return make_unit(plan, plan.tasks[0], run_id="r", attempt=1)


def finished(u: WorkUnit, patch: str) -> tuple[TaskResult, dict[str, str]]:
    """What classify makes of an agent that submitted ``patch`` (graded as the task would: an empty
    patch needs no sandbox)."""
    trace, run = Trace(), AgentRun(AgentOutcome(exit_reason=ExitReason.SUBMITTED))
    graded = patch_within_cap(u, run, patch, trace)
    verdict = empty_patch_verdict(u.instance, get_harness(u.harness)) if not graded else None
    result = classify(u, trace, run, graded, verdict, image="img", started_at="now").row()
    return result, artifacts(result, trace, verdict)


def test_a_patch_over_the_cap_is_the_agents_failure_and_is_not_kept(tmp_path: Path) -> None:
    u = unit(tmp_path, "limits.max_patch_bytes=100")
    patch = "diff --git a/x b/x\n" + "+" * 200
    result, files = finished(u, patch)
    size = len(patch.encode())
    assert (result.resolved, result.error_kind, result.mask_sample) == (False, "agent", False)
    assert result.error == f"PatchTooLarge: the patch is {size} bytes, over the 100-byte cap"
    assert result.model_patch == "" and files["patch.diff"] == "" and "not graded, not kept" in files["agent.log"]
    assert (result.patch_bytes, result.max_patch_bytes, result.limit_hit) == (size, 100, "max_patch_bytes")
    assert result.max_output_bytes == _proc.MAX_OUTPUT_BYTES
    assert len(result.to_json_line()) < 2000


def test_a_patch_within_the_cap_is_graded_and_kept(tmp_path: Path) -> None:
    u = unit(tmp_path)
    trace, run = Trace(), AgentRun(AgentOutcome(exit_reason=ExitReason.SUBMITTED))
    patch = "diff --git a/x b/x\n+é\n"
    assert patch_within_cap(u, run, patch, trace) == patch and run.error is None
    result = classify(u, trace, run, patch, None, image="img", started_at="now").row()
    assert result.model_patch == patch and result.patch_bytes == len(patch.encode()) and result.limit_hit is None
    assert result.max_patch_bytes == _proc.MAX_PATCH_BYTES == 10 * 1024 * 1024


def test_a_patch_cut_by_the_output_cap_says_its_size_is_a_floor(tmp_path: Path) -> None:
    u = unit(tmp_path)
    run = AgentRun(AgentOutcome(exit_reason=ExitReason.ERROR), error="AgentError: it crashed")
    cut = "+" * (_proc.MAX_OUTPUT_BYTES + 50)
    assert patch_within_cap(u, run, cut, Trace()) == ""
    # The agent's own error is kept, the cap's follows it.
    assert run.error is not None and run.error.startswith("AgentError: it crashed; PatchTooLarge: ")
    assert f"{_proc.MAX_OUTPUT_BYTES + 50} bytes or more, over the {_proc.MAX_PATCH_BYTES}-byte cap" in run.error


def test_an_eval_log_over_its_cap_is_recorded_as_the_limit_hit_and_counts(tmp_path: Path) -> None:
    u = unit(tmp_path)
    verdict = Verdict(resolved=False, patch_exists=True, patch_applied=True, output_over_cap=True)
    result = classify(
        u, Trace(), AgentRun(AgentOutcome(exit_reason=ExitReason.SUBMITTED)), "p", verdict, image="i", started_at=""
    ).row()
    assert (result.resolved, result.error_kind, result.mask_sample) == (False, None, False)
    assert result.limit_hit == "eval_output_bytes"


def test_the_patch_cap_is_bounded_by_the_output_cap_and_keys_change_only_off_the_default(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="max_patch_bytes"):
        unit(tmp_path, f"limits.max_patch_bytes={_proc.MAX_OUTPUT_BYTES + 1}")
    default = unit(tmp_path).key
    assert unit(tmp_path, f"limits.max_patch_bytes={_proc.MAX_PATCH_BYTES}").key == default
    assert unit(tmp_path, "limits.max_patch_bytes=1000").key != default


def test_schema_4_rows_read_without_caps() -> None:
    v4 = {
        "schema_version": 4,
        "key": "0123456789abcdef__i",
        "cell": "c",
        "agent": "a",
        "provider": "p",
        "instance_id": "i",
    }
    r = parse_row(v4, "results.jsonl:1")
    assert r.schema_version == SCHEMA_VERSION
    assert (r.patch_bytes, r.max_patch_bytes, r.max_output_bytes, r.limit_hit) == (None, None, None, None)
    assert json.loads(r.to_json_line())["schema_version"] == SCHEMA_VERSION
    schema = polars_schema()
    assert {k: str(schema[k]) for k in ("patch_bytes", "limit_hit")} == {"patch_bytes": "Int64", "limit_hit": "String"}
