"""The adapter imports only the parts of swebench grading needs, and breaks nothing for anyone else.

Each test runs in a fresh interpreter: what matters is which modules a process has loaded. The
import cost is checked by what gets imported (no docker, datasets, pandas; a bounded module count),
never by timings.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The full `import swebench` loads ~1700 modules (the docker SDK, Modal, datasets, pandas, pyarrow); grading
# through the adapter loads ~470, anyswe's own included.
MODULE_BOUND = 1000
HEAVY = ("datasets", "pandas", "pyarrow", "docker", "modal", "swebench.harness.run_evaluation", "swebench.collect")


def run(code: str, *args: str) -> Any:
    """Run ``code`` in a fresh interpreter on this checkout; it prints one JSON value, returned here."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_grading_a_log_imports_no_docker_no_datasets(shared_swebench: Path) -> None:
    manifest = [json.loads(line) for line in (shared_swebench / "corpus" / "manifest.jsonl").read_text().splitlines()]
    m = next(m for m in manifest if m["has_report"])
    logs = shared_swebench / "corpus" / "logs" / str(m["key"])
    got = run(
        """
        import json, sys
        from pathlib import Path
        from anyswe.datasets import load_dataset
        from anyswe.grading import swebench as sb

        rows, log, iid, heavy = sys.argv[1:]
        inst = load_dataset("princeton-nlp/SWE-bench_Verified", rows).by_id()[iid]
        report = sb.eval_report(inst, Path(log).read_text(errors="replace"))
        sb.eval_script(inst), sb.patch_apply_ladder(), sb.modified_files(inst.patch), sb.official_image(iid)
        heavy = [m for m in heavy.split(",") if m in sys.modules]
        print(json.dumps([report["resolved"], report["tests_status"], heavy, len(sys.modules)]))
        """,
        str(shared_swebench / "verified.jsonl"),
        str(logs / "test_output.txt"),
        str(m["instance_id"]),
        ",".join(HEAVY),
    )
    resolved, tests_status, heavy, n_modules = got
    official = json.loads((logs / "report.json").read_text())[m["instance_id"]]
    assert (resolved, tests_status) == (official["resolved"], official["tests_status"])
    assert heavy == []
    assert n_modules < MODULE_BOUND


def test_the_rest_of_swebench_and_datasets_stay_whole() -> None:
    """After the lean load, `import datasets` is the real library and `import swebench` the whole package."""
    got = run(
        """
        import json, sys
        from anyswe.grading import swebench as sb

        sb.version()
        import swebench.harness.utils as utils
        before = "datasets" in sys.modules

        import datasets
        import datasets.load
        real = datasets.load_dataset is datasets.load.load_dataset and isinstance(datasets.Dataset, type)
        forwards = isinstance(datasets.Dataset.from_dict({"a": [1]}), utils.Dataset)

        import swebench
        from swebench import get_eval_report
        from swebench.harness import *  # runs swebench/harness/__init__.py, as usual
        whole = [
            callable(swebench.run_evaluation),
            swebench.harness.grading.get_eval_report is get_eval_report,
            swebench.harness.modal_eval is sys.modules["swebench.harness.modal_eval"],
            "swebench.collect" in sys.modules and "swebench.harness.prepare_images" in sys.modules,
            "__getattr__" not in vars(swebench) and "__getattr__" not in vars(swebench.harness),
            swebench.__version__,
        ]
        try:
            swebench.no_such_name
            missing = "found"
        except AttributeError:
            missing = "AttributeError"
        print(json.dumps([before, real, forwards, whole, missing]))
        """
    )
    assert got == [False, True, True, [True, True, True, True, True, "4.1.0"], "AttributeError"]


def test_the_ladder_is_run_evaluations_own() -> None:
    got = run(
        """
        import json
        from anyswe.grading import swebench as sb

        ladder = sb.patch_apply_ladder()
        from swebench.harness.run_evaluation import GIT_APPLY_CMDS
        print(json.dumps([ladder, GIT_APPLY_CMDS]))
        """
    )
    assert got[0] == got[1] and len(got[0]) >= 2


def test_a_swebench_imported_before_is_used_as_it_is() -> None:
    got = run(
        """
        import json, sys
        import swebench
        from anyswe.grading import swebench as sb

        print(json.dumps([sb.version(), sys.modules["swebench"] is swebench, "datasets" in sys.modules,
                          sb.patch_apply_ladder() == swebench.harness.run_evaluation.GIT_APPLY_CMDS]))
        """
    )
    assert got == ["4.1.0", True, True, True]


def test_the_forwarded_datasets_functions_load_data(tmp_path: Path) -> None:
    """Other users of swebench.harness.utils still load datasets through it (the forwarders import the library)."""
    got = run(
        """
        import json, sys
        from anyswe.grading import swebench as sb

        sb.version()
        from swebench.harness import utils
        before = "datasets" in sys.modules

        import datasets
        rows = {"instance_id": ["a__b-1", "a__b-2"], "repo": ["a/b", "a/b"]}
        datasets.Dataset.from_dict(rows).save_to_disk(sys.argv[1] + "/test")
        loaded = [r["instance_id"] for r in utils.load_swebench_dataset(sys.argv[1], "test", ["a__b-2"])]
        print(json.dumps([before, loaded, len(utils.load_from_disk(sys.argv[1] + "/test"))]))
        """,
        str(tmp_path),
    )
    assert got == [False, ["a__b-2"], 2]


def test_a_datasets_imported_before_is_bound_as_it_is() -> None:
    got = run(
        """
        import json
        import datasets
        from anyswe.grading import swebench as sb

        sb.version()
        from swebench.harness import utils
        print(json.dumps([utils.load_dataset is datasets.load_dataset, utils.Dataset is datasets.Dataset]))
        """
    )
    assert got == [True, True]


def test_an_unknown_layout_falls_back_to_the_whole_import() -> None:
    """If the lean load fails (here: no readable __version__), swebench is imported as usual, still checked."""
    got = run(
        """
        import json, sys
        from anyswe.grading import _swebench_lean
        from anyswe.grading import swebench as sb

        def broken(path, name):
            raise LookupError(name)

        _swebench_lean._literal_assignment = broken
        version = sb.version()
        import swebench
        print(json.dumps([version, "swebench.harness.run_evaluation" in sys.modules, "__getattr__" in vars(swebench),
                          sb.known_repo("django/django")]))
        """
    )
    assert got == ["4.1.0", True, False, True]


def test_an_unreadable_ladder_or_changed_marker_is_a_grading_error() -> None:
    got = run(
        """
        import json
        from anyswe.errors import GradingError
        from anyswe.grading import _swebench_lean
        from anyswe.grading import swebench as sb

        def fails(call):
            try:
                call()
            except GradingError as exc:
                return str(exc)
            return None

        def not_a_list():
            raise LookupError("GIT_APPLY_CMDS is not a list of strings")

        real = _swebench_lean.git_apply_cmds
        _swebench_lean.git_apply_cmds = not_a_list
        ladder = fails(sb.patch_apply_ladder)
        _swebench_lean.git_apply_cmds = real
        sb.START_TEST_OUTPUT = ">>>>> Something Else"
        sb._swebench.cache_clear()
        marker = fails(sb.version)
        print(json.dumps([ladder, marker]))
        """
    )
    assert "GIT_APPLY_CMDS" in got[0]
    assert "START_TEST_OUTPUT" in got[1]


def test_literal_assignment_reads_literals_only(tmp_path: Path) -> None:
    from anyswe.grading._swebench_lean import _literal_assignment

    src = tmp_path / "m.py"
    src.write_text('import os\nCMDS = ["git apply", "patch -p1"]\nOTHER = os.sep\n')
    assert _literal_assignment(src, "CMDS") == ["git apply", "patch -p1"]
    for name in ("OTHER", "MISSING"):
        with pytest.raises(LookupError):
            _literal_assignment(src, name)
