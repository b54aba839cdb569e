"""Verdict parity with the official SWE-bench harness, on the real logs in ../shared/swebench."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from anyswe.cli import app
from anyswe.datasets import Dataset, Instance, load_dataset
from anyswe.errors import GradingError
from anyswe.grading import get_harness
from anyswe.grading import swebench as sb
from anyswe.grading.regrade import instance_for_key, regrade

SWEBENCH = Path(__file__).resolve().parents[3] / "shared" / "swebench"
CORPUS = SWEBENCH / "corpus"


@pytest.fixture(autouse=True)
def _needs_shared_data(shared_swebench: Path) -> None:
    """Skips without ../shared, fails in CI (the fixture in conftest decides)."""


@pytest.fixture(scope="module")
def verified() -> Dataset:
    return load_dataset("princeton-nlp/SWE-bench_Verified", SWEBENCH / "verified.jsonl")


@pytest.fixture(scope="module")
def manifest() -> list[dict[str, object]]:
    return [json.loads(line) for line in (CORPUS / "manifest.jsonl").read_text().splitlines()]


def test_verified_rows(verified: Dataset) -> None:
    assert len(verified.instances) == 500 and verified.harness == "swebench"
    assert len({i.repo for i in verified.instances}) == 12


def test_every_corpus_log_regrades_to_its_official_verdict(
    verified: Dataset, manifest: list[dict[str, object]]
) -> None:
    results = {r["key"]: r for r in regrade(verified, CORPUS / "logs")}
    with_report = [m for m in manifest if m["has_report"]]
    assert len(with_report) == 374 and len(results) == len(manifest)
    mismatches = []
    for m in with_report:
        key, iid = str(m["key"]), str(m["instance_id"])
        official = json.loads((CORPUS / "logs" / key / "report.json").read_text())[iid]
        got = results[key]
        assert "error" not in got, got
        assert got["instance_id"] == iid
        if got["resolved"] != official["resolved"] or got["tests_status"] != official["tests_status"]:
            mismatches.append(key)
        assert official["resolved"] == m["official_resolved"]
    assert mismatches == []
    # Both verdicts are represented, so the check can fail either way.
    assert {results[str(m["key"])]["resolved"] for m in with_report} == {True, False}


def test_eval_scripts_are_byte_identical(verified: Dataset, manifest: list[dict[str, object]]) -> None:
    rows = verified.by_id()
    compared = 0
    for m in manifest:
        path = CORPUS / "logs" / str(m["key"]) / "eval.sh"
        if path.is_file():
            assert sb.eval_script(rows[str(m["instance_id"])]) == path.read_text(), m["key"]
            compared += 1
    assert compared >= 300


def test_marker_fallback_logs_are_in_the_corpus(manifest: list[dict[str, object]]) -> None:
    """The Modal-style logs (output after the end marker) exist and are graded through swebench's fallback."""
    after_end = 0
    for m in manifest:
        text = (CORPUS / "logs" / str(m["key"]) / "test_output.txt").read_text(errors="replace")
        if sb.START_TEST_OUTPUT in text and sb.END_TEST_OUTPUT in text:
            between = text.split(sb.START_TEST_OUTPUT)[1].split(sb.END_TEST_OUTPUT)[0]
            if "PASSED" not in between and "FAILED" not in between and " ok" not in between:
                after_end += 1
    assert after_end > 0


def _log(body: str) -> str:
    return f"+ : '{sb.START_TEST_OUTPUT}'\n{body}\n+ : '{sb.END_TEST_OUTPUT}'\n"


def _failure_line(repo: str, test: str) -> str:
    if repo == "chartjs/Chart.js":
        return f"Chrome 120.0.0.0 (Linux x86_64) {test}FAILED"
    if repo == "markedjs/marked":
        return f"1) {test}"
    parts = test.split(":")  # p5.js: the describe path, one deeper indent per level, then a colon
    return "\n".join(f"{' ' * (2 + 2 * i)}{'1) ' if i == 0 else ''}{p}" for i, p in enumerate(parts)) + ":"


def test_fail_only_grading_on_multimodal_rows() -> None:
    rows = [
        Instance.model_validate(json.loads(x))
        for x in (SWEBENCH / "multimodal_fail_only.jsonl").read_text().splitlines()
    ]
    assert len(rows) == 54 and {r.repo for r in rows} == {"chartjs/Chart.js", "processing/p5.js", "markedjs/marked"}
    harness = get_harness("swebench")
    for inst in rows:
        # FAIL_ONLY: a test that is not reported failed counts as passing, so an empty run resolves...
        clean = harness.grade_log(inst, _log("all done"))
        assert clean.resolved is True, inst.instance_id
        assert clean.tests_status["FAIL_TO_PASS"]["success"] == inst.FAIL_TO_PASS
        # ...and one failing FAIL_TO_PASS test does not.
        target = inst.FAIL_TO_PASS[0]
        failed = harness.grade_log(inst, _log(_failure_line(inst.repo, target)))
        assert failed.resolved is False, inst.instance_id
        assert target in failed.tests_status["FAIL_TO_PASS"]["failure"], inst.instance_id
    # The same empty log under pass-and-fail rules (a Verified repo) is not a resolve.
    verified_row = load_dataset(path=SWEBENCH / "verified.jsonl").instances[0]
    assert harness.grade_log(verified_row, _log("all done")).resolved is False


def test_instance_id_from_key(verified: Dataset) -> None:
    rows = verified.by_id()
    assert instance_for_key("vexp__93265668__astropy__astropy-14539", rows) == "astropy__astropy-14539"
    assert instance_for_key("astropy__astropy-14539", rows) == "astropy__astropy-14539"
    assert instance_for_key("0123abcd__django__django-11099", rows) == "django__django-11099"
    assert instance_for_key("x__nothing__here", rows) is None


def test_regrade_cli_json_and_one_bad_log_does_not_stop_the_others(tmp_path: Path) -> None:
    keys = ["vexp__93265668__astropy__astropy-14539", "atomicos__00247369__pytest-dev__pytest-5840"]
    for key in keys:
        (tmp_path / key).mkdir()
        (tmp_path / key / "test_output.txt").write_bytes((CORPUS / "logs" / key / "test_output.txt").read_bytes())
    (tmp_path / "zzz__not__an__instance").mkdir()
    (tmp_path / "zzz__not__an__instance" / "test_output.txt").write_text("nothing")
    r = CliRunner().invoke(app, ["regrade", str(SWEBENCH / "verified.jsonl"), str(tmp_path), "--json"])
    assert r.exit_code == 1  # one log could not be graded
    out = [json.loads(line) for line in r.output.splitlines() if line.startswith("{")]
    assert [o["key"] for o in out] == sorted([*keys, "zzz__not__an__instance"])
    good = [o for o in out if "error" not in o]
    assert len(good) == 2 and all({"key", "instance_id", "resolved", "tests_status"} <= set(o) for o in good)
    official = json.loads((CORPUS / "logs" / keys[0] / "report.json").read_text())["astropy__astropy-14539"]
    assert next(o for o in good if o["key"] == keys[0])["resolved"] == official["resolved"]


def test_wrong_or_missing_swebench_fails_loud(monkeypatch: pytest.MonkeyPatch, verified: Dataset) -> None:
    import swebench

    inst = verified.instances[0]
    sb._swebench.cache_clear()
    monkeypatch.setattr(swebench, "__version__", "4.0.3")
    with pytest.raises(GradingError, match=r"swebench 4\.0\.3 is installed, but grading needs exactly 4\.1\.0"):
        sb.eval_report(inst, "log")
    monkeypatch.undo()
    sb._swebench.cache_clear()
    monkeypatch.setitem(sys.modules, "swebench", None)  # as if not installed
    with pytest.raises(GradingError, match="swebench is not installed"):
        sb.eval_script(inst)
    monkeypatch.undo()
    sb._swebench.cache_clear()
    assert sb.version() == "4.1.0"


def test_a_log_with_undecodable_bytes_regrades_as_it_reads_with_them_replaced(
    tmp_path: Path, verified: Dataset
) -> None:
    """regrade hands swebench the log's path; a log that is not UTF-8 (a test printed raw bytes) is
    graded as its text with those bytes replaced, as when it was read here first, never an error."""
    key = "vexp__93265668__astropy__astropy-14539"
    log = (CORPUS / "logs" / key / "test_output.txt").read_bytes()
    first = log.index(b"\n") + 1
    (tmp_path / key).mkdir()
    (tmp_path / key / "test_output.txt").write_bytes(log[:first] + b"raw \xff\xfe bytes\n" + log[first:])
    [got] = regrade(verified, tmp_path)
    inst = verified.by_id()["astropy__astropy-14539"]
    text = (tmp_path / key / "test_output.txt").read_text(errors="replace")
    assert "\ufffd" in text
    assert "error" not in got, got
    assert got["tests_status"] == sb.eval_report(inst, text)["tests_status"]
    official = json.loads((CORPUS / "logs" / key / "report.json").read_text())["astropy__astropy-14539"]
    assert got["resolved"] == official["resolved"] and got["tests_status"] == official["tests_status"]
