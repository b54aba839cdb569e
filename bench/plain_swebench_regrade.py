"""The yardstick for `anyswe regrade`: a plain script that grades the shared corpus's logs with
swebench 4.1.0's own `get_eval_report`, nothing of anyswe in it. Prints the number resolved.

With ``--lean`` (the lean anchor), swebench is imported as anyswe imports it (only the modules grading
needs, anyswe/grading/_swebench_lean.py), so what is left is grading alone: swebench's whole-package
import (about 3 s here) no longer hides anyswe's own costs.

    uv run python bench/plain_swebench_regrade.py [--lean] [SHARED/swebench]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

if "--lean" in sys.argv:
    sys.argv.remove("--lean")
    from anyswe.grading import _swebench_lean

    _swebench_lean.load()

from swebench.harness.constants import MAP_REPO_TO_EXT
from swebench.harness.grading import get_eval_report
from swebench.harness.test_spec.test_spec import TestSpec

data = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2] / "shared" / "swebench"
rows = {r["instance_id"]: r for r in map(json.loads, (data / "verified.jsonl").read_text().splitlines())}
resolved = graded = 0
for entry in map(json.loads, (data / "corpus" / "manifest.jsonl").read_text().splitlines()):
    row = rows[entry["instance_id"]]
    log = data / "corpus" / "logs" / entry["key"] / "test_output.txt"
    spec = TestSpec(
        instance_id=row["instance_id"], repo=row["repo"], version=row["version"], repo_script_list=[],
        eval_script_list=[], env_script_list=[], arch="x86_64", FAIL_TO_PASS=json.loads(row["FAIL_TO_PASS"]),
        PASS_TO_PASS=json.loads(row["PASS_TO_PASS"]), language=MAP_REPO_TO_EXT.get(row["repo"], "py"),
        docker_specs={}, namespace=None,
    )  # fmt: skip
    pred = {"instance_id": row["instance_id"], "model_name_or_path": "plain", "model_patch": "x"}
    report = get_eval_report(spec, pred, str(log), include_tests_status=True)
    resolved += bool(report[row["instance_id"]]["resolved"])
    graded += 1
print(f"{graded} logs, {resolved} resolved")
