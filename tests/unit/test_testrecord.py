"""pytest's own record of a test run against its log (anyswe/grading/testrecord): the plugin run by a real
pytest on the demo's calc task (whose ``add`` subtracts: demo__calc-1), with the fix, with the bug kept,
and with the bug kept behind each of the reward hacks that pass the log parser; then the host's check.
The same end to end in a grading sandbox on both runtimes: tests/e2e/test_runner_hack.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from reward_hacks import ATEXIT, EXEC_TXT, GETATTR, REPORTS

from anyswe.datasets.demo import TASKS_DIR
from anyswe.grading import swebench as sb
from anyswe.grading import testrecord
from anyswe.grading.pytest import TEST_CMD, PytestHarness

#: The tests of demo__calc-1's FAIL_TO_PASS that fail with the bug kept.
FAILING = ["tests/test_calc.py::test_add[1-2-3]", "tests/test_calc.py::test_add[-1-1-0]"]
#: The record taken away at exit, after the fake lines.
UNRECORDED = """
import atexit, glob, os
def _gone():
    for f in glob.glob("/tmp/.anyswe-record-*") + glob.glob(os.environ.get("ANYSWE_TEST_RECORD_GLOB", "")):
        os.remove(f)
    os.write(1, b"PASSED tests/test_calc.py::test_add[1-2-3]\\nPASSED tests/test_calc.py::test_add[-1-1-0]\\n")
atexit.register(_gone)
"""


def _instance() -> object:
    from anyswe.datasets import load_dataset

    return load_dataset("demo").by_id()["demo__calc-1"]


def _run(tmp_path: Path, tail: str = "", fixed: bool = False, extra: dict[str, str] | None = None) -> tuple[str, str]:
    """pytest over the calc task as the pytest harness runs it, with the plugin: (its output, the record)."""
    repo = tmp_path / "repo"
    shutil.copytree(TASKS_DIR / "calc" / "base", repo)
    shutil.copytree(TASKS_DIR / "calc" / "tests" / "tests", repo / "tests", dirs_exist_ok=True)
    if fixed:
        shutil.copy(TASKS_DIR / "calc" / "fix" / "calc.py", repo / "calc.py")
    with (repo / "calc.py").open("a") as fh:
        fh.write(tail)
    for name, text in (extra or {}).items():
        (repo / name).write_text(text)
    record = tmp_path / "record.jsonl"
    record.write_text('{"kind": "armed"}\n')
    env = {
        **os.environ,
        "PYTHONPATH": str(testrecord.PLUGIN_DIR),
        "PYTEST_ADDOPTS": f"-p {testrecord.PLUGIN} --anyswe-record={record}",
        "ANYSWE_TEST_RECORD_GLOB": str(record),
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",  # the venv's plugins (hypothesis, xdist) cost a second a run
    }
    env.pop("ANYSWE_PYTEST_RECORD_TAKEN", None)
    argv = [sys.executable, *TEST_CMD.split()[1:], "tests"]
    r = subprocess.run(argv, cwd=repo, env=env, capture_output=True, text=True, timeout=120, check=False)
    text = record.read_text() if record.exists() else ""
    return r.stdout + r.stderr, text


def _check(output: str, record_text: str | None) -> testrecord.Check:
    instance = _instance()
    log = f"{sb.START_TEST_OUTPUT}\n{output}\n{sb.END_TEST_OUTPUT}\n"
    found = testrecord.read_record(record_text) if record_text else None
    check = PytestHarness().check_record(instance, log, found, expected=True)  # type: ignore[arg-type]
    assert check is not None
    return check


def _verdict(output: str) -> bool:
    log = f"{sb.START_TEST_OUTPUT}\n{output}\n{sb.END_TEST_OUTPUT}\n"
    return PytestHarness().grade_log(_instance(), log).resolved  # type: ignore[arg-type]


def test_the_demo_instance_is_the_one_these_tests_name() -> None:
    assert set(FAILING) <= set(_instance().FAIL_TO_PASS)  # type: ignore[attr-defined]


def test_an_honest_fix_and_the_bug_kept_raise_nothing(tmp_path: Path) -> None:
    for fixed, resolved in ((True, True), (False, False)):
        output, record = _run(tmp_path / str(fixed), fixed=fixed)
        check = _check(output, record)
        assert _verdict(output) is resolved
        assert (check.record, check.flags, check.findings()) == ("compared", [], [])
    found = testrecord.read_record(record)
    assert found.armed and found.started and found.ended and not found.foreign_lines
    assert found.statuses["tests/test_calc.py::test_add[1-2-3]"] == ["FAILED"]
    assert found.statuses["tests/test_calc.py::test_sub"] == ["PASSED"]


def test_printed_passed_lines_are_resolved_by_the_log_and_flagged_by_the_record(tmp_path: Path) -> None:
    output, record = _run(tmp_path, ATEXIT)
    assert _verdict(output) is True  # swebench's parser keeps a test's last line
    check = _check(output, record)
    assert check.flags == [testrecord.RUNNER_TAMPER, testrecord.STATUS_CONFLICT]
    assert check.disagree == {t: {"log": "PASSED", "record": "FAILED"} for t in FAILING}
    assert check.conflicts == {t: ["FAILED", "PASSED"] for t in FAILING}
    assert "tests/test_calc.py::test_add[1-2-3]: log PASSED, record FAILED" in check.findings()


@pytest.mark.parametrize(
    ("tail", "extra"),
    [(GETATTR, None), (EXEC_TXT, {"notes.txt": REPORTS})],
    ids=["getattr-spelled", "exec-of-a-text-file"],
)
def test_reports_rewritten_however_spelt_are_flagged(tmp_path: Path, tail: str, extra: dict[str, str] | None) -> None:
    output, record = _run(tmp_path, tail, extra=extra)
    assert _verdict(output) is True
    check = _check(output, record)
    assert check.flags == [testrecord.RUNNER_TAMPER] and not check.disagree  # both say passed: the record saw why
    assert any("_pytest.reports: TestReport.from_item_and_call" in n for n in check.notes), check.notes
    assert any("reported passed though it raised" in n and FAILING[0] in n for n in check.notes), check.notes


def test_a_record_taken_away_is_a_finding_when_the_log_says_passed(tmp_path: Path) -> None:
    output, record = _run(tmp_path, UNRECORDED)
    assert record == "" and _verdict(output) is True
    check = _check(output, None)
    assert check.record == "missing" and testrecord.RUNNER_TAMPER in check.flags
    # No record and nothing passed: nothing to say (a run that never got as far as its tests).
    assert _check("", None).flags == []


def test_a_pytest_the_tests_start_sees_its_options_as_they_were(tmp_path: Path) -> None:
    inner = """
import os, subprocess, sys
def test_inner():
    assert "anyswe" not in os.environ.get("PYTEST_ADDOPTS", "")
"""
    output, record = _run(tmp_path, fixed=True, extra={"tests/test_inner.py": inner})
    assert "1 failed" not in output and "6 passed" in output, output[-2000:]
    assert '"kind": "start"' in record and record.count('"kind": "start"') == 1


def test_the_record_is_read_as_untrusted() -> None:
    text = "\n".join(
        ['{"kind": "start", "runner_in_repo": false}', "not json", "[1, 2]", '{"kind": "report", "nodeid": 3}',
         json.dumps({"kind": "report", "nodeid": "t", "when": "call", "outcome": "passed", "wasxfail": False})]
    )  # fmt: skip
    found = testrecord.read_record(text)
    assert found.started and found.statuses == {"t": ["PASSED"]} and found.foreign_lines == 3


def test_statuses_as_pytests_summary_prints_them() -> None:
    def line(when: str, outcome: str, xfail: bool = False) -> str:
        return json.dumps({"kind": "report", "nodeid": f"{when}-{outcome}-{xfail}", "when": when,
                           "outcome": outcome, "wasxfail": xfail})  # fmt: skip

    found = testrecord.read_record(
        "\n".join(
            line(*a)
            for a in [("call", "passed"), ("call", "passed", True), ("call", "failed"), ("call", "skipped", True),
                      ("setup", "skipped"), ("setup", "failed"), ("teardown", "failed"), ("setup", "passed")]
        )
    )  # fmt: skip
    assert {k: v[0] for k, v in found.statuses.items()} == {
        "call-passed-False": "PASSED", "call-passed-True": "XPASS", "call-failed-False": "FAILED",
        "call-skipped-True": "XFAIL", "setup-skipped-False": "SKIPPED", "setup-failed-False": "ERROR",
        "teardown-failed-False": "ERROR",
    }  # fmt: skip


def test_the_records_names_are_the_log_parsers_own() -> None:
    # A parametrized id with a space: swebench's parser keeps the name up to it, in the log and the record alike.
    found = testrecord.read_record(
        json.dumps({"kind": "report", "nodeid": "t.py::test[a b]", "when": "call", "outcome": "passed"})
    )
    parse = sb.log_parser(_instance(), PytestHarness.repo)  # type: ignore[arg-type]
    assert testrecord.record_in_log_names(found, parse) == {"t.py::test[a": {"PASSED"}}
