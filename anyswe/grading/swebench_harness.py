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
    from anyswe.datasets.instance import Instance


class SWEbenchHarness(Harness):
    name: ClassVar[str] = "swebench"

    def _prepare(self, instance: Instance) -> None:
        # A dataset outside SWE-bench may carry its own swebench spec (test_cmd, ...) in its rows.
        spec = (instance.model_extra or {}).get("swebench_spec")
        if isinstance(spec, dict) and not sb.known_repo(instance.repo):
            sb.register_custom_repo(instance.repo, instance.version, **spec)

    def _eval_script(self, instance: Instance) -> str:
        return sb.eval_script(instance)

    def _grade_log(self, instance: Instance, test_output: str) -> LogVerdict:
        report = sb.eval_report(instance, test_output)
        return LogVerdict(resolved=bool(report.get("resolved")), tests_status=report.get("tests_status", {}))
