"""The generic pytest harness for local datasets (the demo benchmark, a user's own JSONL).

Its eval script has the shape of swebench's (reset the test files, apply the test patch, run the
tests between the markers, reset again) without conda; its verdicts come from swebench's own
``get_eval_report`` rules with the pytest log parser, the repository given as a :class:`RepoSpec`.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, ClassVar

from anyswe.grading import diffs
from anyswe.grading import swebench as sb
from anyswe.grading.base import Harness, LogVerdict

if TYPE_CHECKING:
    from anyswe.datasets.instance import Instance
    from anyswe.grading.testrecord import Parser

TEST_CMD = "python3 -m pytest -rA -p no:cacheprovider"


def _delimiter(text: str) -> str:
    delim = "EOF_114329324912"
    while delim in text:
        delim += "_X"
    return delim


class PytestHarness(Harness):
    name: ClassVar[str] = "pytest"

    #: Any repository, its tests run by pytest and read by swebench's pytest parser.
    repo: ClassVar[sb.RepoSpec] = sb.RepoSpec({"test_cmd": TEST_CMD}, parser="pytest")

    def _eval_script(self, instance: Instance) -> str:
        base = instance.base_commit
        existing = sb.modified_files(instance.test_patch)
        targets = diffs.patch_targets(instance.test_patch)
        reset = f"git checkout {base} {' '.join(shlex.quote(f) for f in existing)}" if existing else ":"
        delim = _delimiter(instance.test_patch)
        lines = [
            "#!/bin/bash",
            "set -uxo pipefail",
            f"cd {self.workdir}",
            f"git config --global --add safe.directory {self.workdir}",
            "git status",
            f"git -c core.fileMode=false diff {base}",
            reset,
            f"git apply -v - <<'{delim}'\n{instance.test_patch}\n{delim}",
            f": '{sb.START_TEST_OUTPUT}'",
            " ".join([TEST_CMD, *(shlex.quote(t) for t in targets)]),
            f": '{sb.END_TEST_OUTPUT}'",
            reset,
        ]
        return "\n".join(lines) + "\n"

    def runs_pytest(self, instance: Instance) -> bool:
        return True

    def log_parser(self, instance: Instance) -> Parser:
        return sb.log_parser(instance, self.repo)

    def _grade_log(self, instance: Instance, test_output: str) -> LogVerdict:
        report = sb.eval_report(instance, test_output, repo=self.repo)
        return LogVerdict(resolved=bool(report.get("resolved")), tests_status=report.get("tests_status", {}))
