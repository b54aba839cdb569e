"""A report that a run directory cannot subvert (issue 31, item 5): a run directory is read as untrusted.

Its rows are validated strictly (``"resolved": "yes"`` is an error, never true), a key must be a task
key (``../..`` is refused with the file and line before anything is read under it), a task's files are
read without following links (a ``test_output.txt`` linked to a file of the host does not put that
file into the page), and JSON in the page's script elements has ``<``, ``>`` and ``&`` escaped. The
page opening in Chromium with such text in it: tests/e2e/test_report_untrusted_browser.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from anyswe.errors import ResultsError
from anyswe.results.report import render_report, write_report
from anyswe.results.schema import TaskResult
from anyswe.results.store import read_results
from anyswe.results.tables import task_frame

KEY = "0123456789abcdef__demo__calc-1"
HOSTILE = "<!--<script>alert(1)</script><script>"


def row(**kw: object) -> dict[str, object]:
    base = {"key": KEY, "cell": "replay.none.docker", "agent": "replay", "provider": "docker"}
    return {**base, "instance_id": "demo__calc-1", "resolved": False, **kw}


def write_run(run: Path, *rows: dict[str, object]) -> Path:
    run.mkdir(parents=True, exist_ok=True)
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def task_dir(run: Path, key: str = KEY) -> Path:
    d = run / "tasks" / key
    d.mkdir(parents=True, exist_ok=True)
    return d


def test_json_in_the_page_has_no_angle_bracket_or_ampersand(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", TaskResult.model_validate(row(error=HOSTILE)).model_dump(mode="json"))
    (task_dir(run) / "patch.diff").write_text(f"diff --git a/calc.py b/calc.py\n+# {HOSTILE} & more\n")
    html = render_report(run)
    assert "<!--" not in html and "<script>alert" not in html
    start = html.index('id="task-data">') + len('id="task-data">')
    data = html[start : html.index("</script>", start)]
    assert not {"<", ">", "&"} & set(data)
    detail = json.loads(data)[KEY]  # the same text once parsed
    assert HOSTILE in detail["patch"] and "& more" in detail["patch"] and HOSTILE in detail["meta"]


def test_a_linked_task_file_is_not_followed(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET-ENVIRONMENT=hunter2\n")
    run = write_run(tmp_path / "run", row(trajectory_path="../secret.txt"))
    d = task_dir(run)
    os.symlink(secret, d / "test_output.txt")
    os.symlink(secret, d / "patch.diff")
    os.symlink(secret, d / "report.json")
    html = render_report(run)
    assert "hunter2" not in html and "SECRET" not in html
    assert "test_output.txt not copied: it is a symbolic link" in html
    # A linked task directory, and a run directory named through a link (the user's own) that is read.
    other = tmp_path / "other"
    other.mkdir()
    (other / "test_output.txt").write_text("SECRET from another directory\n")
    second = "fedcba9876543210__demo__calc-1"
    (run / "results.jsonl").write_text(json.dumps(row()) + "\n" + json.dumps(row(key=second, sample=1)) + "\n")
    os.symlink(other, run / "tasks" / second)
    (tmp_path / "latest").symlink_to(run)
    html = render_report(tmp_path / "latest")
    assert "SECRET" not in html and "is not a directory (a link or a file)" in html


@pytest.mark.parametrize("key", ["../..", "..", "../../etc", "0123456789abcdef__../x", "a/b", "k"])
def test_a_key_that_is_not_a_task_key_is_refused_where_it_is(tmp_path: Path, key: str) -> None:
    run = write_run(tmp_path / "run", row(), row(key=key))
    (tmp_path / "patch.diff").write_text("SECRET outside the run\n")
    with pytest.raises(ResultsError, match=r"results\.jsonl:2: field 'key': .* is not a task key"):
        render_report(run)
    with pytest.raises(ResultsError, match=r"results\.jsonl:2: field 'key'"):
        write_report(run, tmp_path / "report.html")
    assert not (tmp_path / "report.html").exists()
    # A task key names its row's instance.
    other = write_run(tmp_path / "other", row(key="0123456789abcdef__demo__leap-5"))
    with pytest.raises(ResultsError, match="not a task key of the row's instance 'demo__calc-1'"):
        task_frame(other)


@pytest.mark.parametrize(
    ("field", "value"),
    [("resolved", "yes"), ("resolved", 1), ("resolved", "true"), ("mask_sample", "no"), ("sample", "0")],
)
def test_a_field_of_the_wrong_json_type_is_an_error_never_true(tmp_path: Path, field: str, value: object) -> None:
    run = write_run(tmp_path / "run", row(**{field: value}))
    with pytest.raises(ResultsError, match=rf"results\.jsonl:1: field '{field}'"):
        read_results(run / "results.jsonl")
    with pytest.raises(ResultsError, match=rf"results\.jsonl:1: field '{field}'"):
        render_report(run)
    # The same row with JSON's own types reads (the enum from its value, as every row writes it).
    good = write_run(tmp_path / "good", row(resolved=True, exit_reason="submitted", time_total=2))
    (result,) = read_results(good / "results.jsonl")
    assert result.resolved is True and result.exit_reason == "submitted" and result.time_total == 2.0


def test_a_trajectory_that_does_not_validate_draws_no_steps(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", row())
    bad = {"schema_version": 1, "protocol": "openai-chat", "messages": "not a list"}
    (task_dir(run) / "trajectory.jsonl").write_text(json.dumps(bad) + "\n")
    start = (html := render_report(run)).index('id="task-data">') + len('id="task-data">')
    assert json.loads(html[start : html.index("</script>", start)])[KEY]["steps"] == []
