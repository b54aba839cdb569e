"""SWE-bench Pro's rows, image names, eval script and verdict rule, checked against the benchmark's own code
and assets in ../shared/swebench_pro/assets (commit ca10a60): its ``image_uri.py``, its
``create_entryscript`` (read from ``swe_bench_pro_eval.py`` and run as written) and each instance's
``parser.py``. Real instances graded in real images are the container tier's."""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from anyswe.datasets import load_dataset
from anyswe.datasets.instance import Instance
from anyswe.errors import DatasetError
from anyswe.grading import get_harness
from anyswe.grading.pro import OUTPUT_END, OUTPUT_START, strip_binary_hunks

ANSIBLE = "instance_ansible__ansible-d62496fe416623e88b90139dc7917080cb04ce70-v0f01c69f1e2528b935359cfe578530722bca2c59"


@pytest.fixture(scope="module")
def pro(shared_swebench: Path) -> Path:
    root = shared_swebench.parent / "swebench_pro"
    if not (root / "rows.jsonl").is_file():
        pytest.skip("../shared/swebench_pro is not here")
    return root


@pytest.fixture(scope="module")
def rows(pro: Path) -> dict[str, Instance]:
    return {i.instance_id: i for i in load_dataset("swe-bench-pro", pro / "rows.jsonl").instances}


def _pro_functions(pro: Path) -> dict[str, Any]:
    """create_entryscript and the two Dockerfile readers, from Pro's own eval script, run as written
    (the module itself imports pandas and modal, which grading has no use for)."""
    tree = ast.parse((pro / "assets" / "swe_bench_pro_eval.py").read_text())
    wanted = {"create_entryscript", "load_base_docker", "instance_docker", "strip_binary_hunks"}
    module = ast.Module(
        body=[n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in wanted], type_ignores=[]
    )
    namespace: dict[str, Any] = {"re": __import__("re")}
    exec(compile(module, "swe_bench_pro_eval.py", "exec"), namespace)
    return namespace


def test_every_row_loads_with_its_lists_as_pros_eval_reads_them(pro: Path, rows: dict[str, Instance]) -> None:
    raw = {r["instance_id"]: r for r in map(json.loads, (pro / "rows.jsonl").read_text().splitlines())}
    assert len(rows) == len(raw) == 100
    literal = 0
    for iid, row in raw.items():
        for field in ("fail_to_pass", "pass_to_pass", "selected_test_files_to_run"):
            # Pro's own eval reads these with eval(); a literal is what it evaluates to.
            expected = ast.literal_eval(row[field]) if isinstance(row[field], str) else row[field]
            literal += isinstance(row[field], str) and row[field].lstrip().startswith("['")
            assert (rows[iid].model_extra or {})[field] == expected
        assert ast.literal_eval(row["fail_to_pass"]) == rows[iid].FAIL_TO_PASS
        assert ast.literal_eval(row["pass_to_pass"]) == rows[iid].PASS_TO_PASS
    assert literal > 0  # some rows write their lists as Python literals (README: 99 of 300 fields)


def test_image_names_are_pros_own(pro: Path, rows: dict[str, Instance]) -> None:
    spec = importlib.util.spec_from_file_location("pro_image_uri", pro / "assets" / "helper_code" / "image_uri.py")
    assert spec is not None and spec.loader is not None
    image_uri = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(image_uri)
    for iid, row in rows.items():
        expected = image_uri.get_dockerhub_image_uri(iid, "jefzda", row.repo)
        assert (row.model_extra or {})["docker_image"] == expected


def test_the_eval_script_is_pros_entry_script_after_its_patch_apply(
    pro: Path, rows: dict[str, Instance], monkeypatch: pytest.MonkeyPatch
) -> None:
    functions = _pro_functions(pro)
    monkeypatch.chdir(pro / "assets")  # Pro reads the Dockerfiles relative to its own directory
    raw = {r["instance_id"]: r for r in map(json.loads, (pro / "rows.jsonl").read_text().splitlines())}
    harness = get_harness("swebench-pro")
    for iid, row in rows.items():
        theirs = [line for line in functions["create_entryscript"](raw[iid]).split("\n") if line.strip()]
        # The patch is applied (git apply -v) by the ladder to a fresh sandbox at the base commit, which is
        # what Pro's reset, checkout and apply leave; comments say nothing.
        applied = ("git reset --hard", "git checkout " + raw[iid]["base_commit"], "git apply -v /workspace/patch.diff")
        theirs = [line for line in theirs if not line.startswith(("#", *applied))]
        ours = harness.eval_script(row).split("\n")
        at = [ours.index(line) for line in theirs]
        assert at == sorted(at), iid  # every line of theirs, in their order
        script = (pro / "assets" / "run_scripts" / iid / "run_script.sh").read_text().rstrip("\n")
        assert script in harness.eval_script(row)
    assert harness.apply_ladder == ("git apply -v",)


def test_binary_hunks_are_stripped_as_pro_strips_them(pro: Path) -> None:
    theirs = _pro_functions(pro)["strip_binary_hunks"]
    patch = (
        "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n"
        "diff --git a/img.png b/img.png\nBinary files a/img.png and b/img.png differ\n"
        "diff --git a/y.bin b/y.bin\nGIT binary patch\nliteral 3\nabc\n"
    )
    assert strip_binary_hunks(patch) == theirs(patch) == patch.split("diff --git a/img.png")[0]


def _graded(pro: Path, row: Instance, statuses: dict[str, str], tmp_path: Path) -> Any:
    """Pro's own parser.py run on a pytest -v log of ``statuses``; its output.json graded by anyswe."""
    stdout, stderr, out = tmp_path / "stdout.log", tmp_path / "stderr.log", tmp_path / "output.json"
    stdout.write_text("".join(f"{name} {status} [ 50%]\n" for name, status in statuses.items()))
    stderr.write_text("")
    parser = pro / "assets" / "run_scripts" / row.instance_id / "parser.py"
    subprocess.run([sys.executable, str(parser), str(stdout), str(stderr), str(out)], check=True)
    log = f"...\n{OUTPUT_START}\n{out.read_text()}\n{OUTPUT_END}\n"
    return get_harness("swebench-pro").grade_log(row, log)


def test_resolved_is_every_fail_to_pass_and_pass_to_pass_test_passed(
    pro: Path, rows: dict[str, Instance], tmp_path: Path
) -> None:
    row = rows[ANSIBLE]
    every = {t: "PASSED" for t in row.FAIL_TO_PASS + row.PASS_TO_PASS}
    assert _graded(pro, row, every, tmp_path).resolved is True
    one_fails = {**every, row.PASS_TO_PASS[3]: "FAILED"}
    verdict = _graded(pro, row, one_fails, tmp_path)
    assert verdict.resolved is False
    assert verdict.tests_status["PASS_TO_PASS"]["failure"] == [row.PASS_TO_PASS[3]]
    assert verdict.tests_status["FAIL_TO_PASS"]["success"] == row.FAIL_TO_PASS
    # No output.json (the parser failed, the tests never ran): nothing passed, as Pro counts it.
    assert get_harness("swebench-pro").grade_log(row, "the run died\n").resolved is False


def test_rows_without_their_assets_say_where_they_looked(pro: Path, tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"rows.jsonl: row 1: SWE-bench Pro assets: cannot read .*nowhere"):
        load_dataset("swe-bench-pro", pro / "rows.jsonl", assets=tmp_path / "nowhere")


@pytest.mark.parametrize("iid", ["../../../etc/passwd", "instance_x/../../y", ".hidden", "a b"])
def test_an_instance_id_is_checked_before_it_names_an_asset_path(pro: Path, tmp_path: Path, iid: str) -> None:
    row = json.loads((pro / "rows.jsonl").read_text().splitlines()[0])
    (tmp_path / "rows.jsonl").write_text(json.dumps({**row, "instance_id": iid}) + "\n")
    with pytest.raises(DatasetError, match=r"rows.jsonl: row 1: a SWE-bench Pro row's instance_id .* (may|is)"):
        load_dataset("swe-bench-pro", tmp_path / "rows.jsonl", assets=pro / "assets")


def test_output_json_is_set_against_pytests_record_under_pros_names(rows: dict[str, Instance]) -> None:
    from anyswe.grading import testrecord

    instance = next(i for i in rows.values() if (i.model_extra or {}).get("repo_language") == "python")
    harness = get_harness("swebench-pro")
    assert harness.runs_pytest(instance)
    f2p = instance.FAIL_TO_PASS[0]
    tests = [{"name": t, "status": "PASSED"} for t in [*instance.FAIL_TO_PASS, *instance.PASS_TO_PASS]]
    log = f"{OUTPUT_START}\n{json.dumps({'tests': tests})}\n{OUTPUT_END}\n"

    def record(status: str) -> testrecord.RunRecord:
        lines = [{"kind": "start"}] + [
            {"kind": "report", "nodeid": t["name"], "when": "call", "outcome": "passed"} for t in tests
        ]
        lines[1]["outcome"] = status  # the first FAIL_TO_PASS test
        return testrecord.read_record("\n".join(json.dumps(x) for x in lines))

    honest = harness.check_record(instance, log, record("passed"), expected=True)
    assert honest is not None and (honest.record, honest.flags) == ("compared", [])
    forged = harness.check_record(instance, log, record("failed"), expected=True)
    assert forged is not None and forged.disagree == {f2p: {"log": "PASSED", "record": "FAILED"}}
    missing = harness.check_record(instance, log, None, expected=True)
    assert missing is not None and missing.record == "missing" and missing.flags == ["runner_tamper"]
