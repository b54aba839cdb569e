"""The SWE-bench harness: swebench 4.1.0's eval scripts and verdicts for SWE-bench-family instances.

Images follow swebench's names (``swebench/sweb.eval.x86_64.<id>:latest``) with the repo at
``/testbed`` and a ``testbed`` conda environment; FAIL_ONLY repos (swebench's ``FAIL_ONLY_REPOS``)
are graded fail-only by swebench's own ``get_eval_report``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from anyswe.grading import swebench as sb
from anyswe.grading.base import Harness, LogVerdict

if TYPE_CHECKING:
    from pathlib import Path

    from anyswe.datasets.instance import Instance
    from anyswe.grading.testrecord import Parser


def own_spec(instance: Instance) -> sb.RepoSpec | None:
    """The swebench spec (test_cmd, ...) a row outside SWE-bench carries for a repository swebench does
    not know (``swebench_spec``); None for the rows swebench grades from its own maps."""
    spec = (instance.model_extra or {}).get("swebench_spec")
    if isinstance(spec, dict) and not sb.known_repo(instance.repo):
        return sb.RepoSpec.of(**spec)
    return None


class SWEbenchHarness(Harness):
    name: ClassVar[str] = "swebench"

    def _eval_script(self, instance: Instance) -> str:
        return sb.eval_script(instance, own_spec(instance))

    def _grade_log(self, instance: Instance, test_output: str | Path) -> LogVerdict:
        report = sb.eval_report(instance, test_output, repo=own_spec(instance))
        return LogVerdict(resolved=bool(report.get("resolved")), tests_status=report.get("tests_status", {}))

    def runs_pytest(self, instance: Instance) -> bool:
        return sb.runs_pytest(instance, own_spec(instance))

    def log_parser(self, instance: Instance) -> Parser:
        return sb.log_parser(instance, own_spec(instance))

    def grade_log_file(self, instance: Instance, path: Path) -> LogVerdict:
        # swebench reads the log from its path itself: not read, written and read again.
        return self._grade_log(instance, path)
