"""The SWE-bench Pro harness: the benchmark's own evaluation (``swe_bench_pro_eval.py`` at ca10a60), not swebench's.

Pro's ``create_entryscript`` runs, in a fresh container of the instance image: the ``ENV`` lines of
the instance's base and instance Dockerfiles as ``export``s, ``cd /app``, a reset to the base
commit, ``git apply -v`` of the patch (binary hunks stripped first), the last line of the row's
``before_repo_set_cmd`` (which checks the test files out of the fix commit), the instance's
``run_script.sh`` with the row's ``selected_test_files_to_run`` joined by commas (stdout and stderr
to two files), and the instance's ``parser.py``, which writes ``output.json``: each test's name and
status. The rule: resolved when every FAIL_TO_PASS and PASS_TO_PASS test is among those PASSED.

Here the patch is applied by the ladder of one rung Pro uses (``git apply -v``) to the fresh
grading sandbox, which starts at the base commit as Pro's reset leaves it; the eval script is the
rest of the entry script, word for word, with the two scripts written where Pro puts them
(``/workspace``), and ``output.json`` (with the tails of the test run's stdout and stderr, for the
reader) printed between markers for :meth:`ProHarness.grade_log`. The row carries the instance's
``run_script.sh``, ``parser.py`` and ``ENV`` lines (``pro_assets``), read from the assets directory
when its rows were loaded (:mod:`anyswe.datasets.pro`).
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any, ClassVar

from anyswe.errors import GradingError
from anyswe.grading.base import Harness, LogVerdict

if TYPE_CHECKING:
    from anyswe.datasets.instance import Instance
    from anyswe.grading.testrecord import Check, RunRecord

OUTPUT_START = ">>>>> anyswe: SWE-bench Pro output.json"
OUTPUT_END = ">>>>> anyswe: end of output.json"
#: What of the test run's stdout and stderr the log keeps (the verdict is output.json's).
_LOG_TAIL = 100_000


def strip_binary_hunks(patch: str) -> str:
    """Pro's ``strip_binary_hunks``: the patch without the file sections that are binary."""
    if not patch:
        return patch
    kept = []
    for section in re.split(r"(?=^diff --git )", patch, flags=re.MULTILINE):
        if not section.strip():
            continue
        if re.search(r"^Binary files .* differ$", section, re.MULTILINE):
            continue
        if re.search(r"^GIT binary patch$", section, re.MULTILINE):
            continue
        kept.append(section)
    return "".join(kept)


def _assets(instance: Instance) -> dict[str, Any]:
    found = (instance.model_extra or {}).get("pro_assets")
    if not isinstance(found, dict) or not {"run_script", "parser", "env"} <= set(found):
        raise GradingError(
            f"{instance.instance_id}: no SWE-bench Pro assets in the row (load it as dataset swe-bench-pro with "
            "`assets:` naming the benchmark's assets directory)"
        )
    return found


def _heredoc(path: str, text: str) -> str:
    delimiter = "EOF_ANYSWE_PRO"
    while delimiter in text:
        delimiter += "_"
    return f"cat > {path} <<'{delimiter}'\n{text.rstrip(chr(10))}\n{delimiter}"


class ProHarness(Harness):
    name: ClassVar[str] = "swebench-pro"
    workdir: ClassVar[str] = "/app"
    apply_ladder: ClassVar[tuple[str, ...] | None] = ("git apply -v",)

    def patch_to_apply(self, patch: str) -> str:
        return strip_binary_hunks(patch)

    def _eval_script(self, instance: Instance) -> str:
        assets = _assets(instance)
        extra = instance.model_extra or {}
        before = str(extra.get("before_repo_set_cmd", "")).strip().split("\n")[-1]
        files = ",".join(str(f) for f in extra.get("selected_test_files_to_run") or [])
        lines = [
            "#!/bin/bash",
            *assets["env"],
            "cd /app",
            before,
            "mkdir -p /workspace",
            _heredoc("/workspace/run_script.sh", assets["run_script"]),
            _heredoc("/workspace/parser.py", assets["parser"]),
            f"bash /workspace/run_script.sh {files} > /workspace/stdout.log 2> /workspace/stderr.log",
            "python /workspace/parser.py /workspace/stdout.log /workspace/stderr.log /workspace/output.json",
            f"echo '--- the test run: stdout, last {_LOG_TAIL} bytes ---'; tail -c {_LOG_TAIL} /workspace/stdout.log",
            f"echo '--- the test run: stderr, last {_LOG_TAIL} bytes ---'; tail -c {_LOG_TAIL} /workspace/stderr.log",
            f"echo '{OUTPUT_START}'",
            "cat /workspace/output.json",
            "echo",
            f"echo '{OUTPUT_END}'",
        ]
        return "\n".join(lines) + "\n"

    def runs_pytest(self, instance: Instance) -> bool:
        return str((instance.model_extra or {}).get("repo_language", "")).lower() == "python"

    def check_record(
        self, instance: Instance, test_output: str, record: RunRecord | None, *, expected: bool
    ) -> Check | None:
        """``output.json`` (Pro's parser: a test's last status) against pytest's record of the run, under
        the parser's names: a test id up to its first space, the statuses it reports."""
        from anyswe.grading import testrecord

        said = {name: [status] for name, status in statuses(test_output).items()}

        def named(found: RunRecord) -> dict[str, set[str]]:
            out: dict[str, set[str]] = {}
            for nodeid, seen in found.statuses.items():
                out.setdefault(nodeid.split(" ")[0], set()).update(s for s in seen if s in _PRO_STATUSES)
            return {k: v for k, v in out.items() if v}

        tests = [*instance.FAIL_TO_PASS, *instance.PASS_TO_PASS]
        return testrecord.compare(
            "", lambda _log: {}, tests, record, expected=expected, record_names=named, log_statuses=said
        )  # fmt: skip

    def _grade_log(self, instance: Instance, test_output: str) -> LogVerdict:
        passed = passed_tests(test_output)
        buckets: dict[str, dict[str, list[str]]] = {}
        for key, tests in (("FAIL_TO_PASS", instance.FAIL_TO_PASS), ("PASS_TO_PASS", instance.PASS_TO_PASS)):
            buckets[key] = {
                "success": [t for t in tests if t in passed],
                "failure": [t for t in tests if t not in passed],
            }
        # Pro's rule: (f2p | p2p) <= passed; no output.json is no test passed (Pro: unresolved).
        resolved = set(instance.FAIL_TO_PASS) | set(instance.PASS_TO_PASS) <= passed
        return LogVerdict(resolved=resolved, tests_status=buckets)


#: The statuses Pro's parsers report (a test pytest says XFAIL or XPASS is in no output.json).
_PRO_STATUSES = frozenset({"PASSED", "FAILED", "SKIPPED", "ERROR"})


def passed_tests(test_output: str) -> set[str]:
    """The names ``output.json`` (between the markers of the log) gives status PASSED; none if it is missing."""
    return {name for name, status in statuses(test_output).items() if status == "PASSED"}


def statuses(test_output: str) -> dict[str, str]:
    """Each test's status in ``output.json`` (between the markers of the log); none if it is missing."""
    start = test_output.rfind(OUTPUT_START)
    if start < 0:
        return {}
    body = test_output[start + len(OUTPUT_START) :]
    body = body[: body.find(OUTPUT_END)] if OUTPUT_END in body else body
    try:
        output = json.loads(body)
    except ValueError:  # parser.py failed: cat printed nothing, or an error
        return {}
    tests = output.get("tests") if isinstance(output, dict) else None
    return {str(t["name"]): str(t.get("status")) for t in tests or [] if isinstance(t, dict) and "name" in t}


__all__ = ["OUTPUT_END", "OUTPUT_START", "ProHarness", "passed_tests", "statuses", "strip_binary_hunks"]
