"""Harnesses: how one dataset's instances are tested and their logs turned into verdicts."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from pathlib import Path

    from anyswe.datasets.instance import Instance
    from anyswe.grading.testrecord import Check, Parser, RunRecord


@dataclass
class Verdict:
    """A graded sample, in swebench's report vocabulary."""

    resolved: bool
    patch_exists: bool
    patch_applied: bool
    applied_by: str | None = None  # the rung of the ladder that applied the patch
    tests_status: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    test_output: str = ""
    eval_script: str = ""
    apply_log: str = ""
    tests_timed_out: bool = False
    #: The eval script's output was over the cap (``grading/ladder.py``): not graded, unresolved.
    output_over_cap: bool = False
    #: The patch's own failure that ended its grading (its tests used up the sandbox's memory limit,
    #: which ended the sandbox): unresolved, and the task's error (``error_kind`` agent, not masked).
    error: str | None = None
    #: The log against pytest's own record of the run (grading/testrecord): its flags join the patch's.
    #: None: the harness reads no log line by line (nothing was checked).
    check: Check | None = None
    #: Filled in by ``anyswe.grade``: the harness, the image graded in and its digests (a run's row has them too).
    harness: str | None = None
    image: str | None = None
    image_digest: str | None = None
    image_source_digest: str | None = None

    def report(self, instance_id: str) -> dict[str, Any]:
        """``report.json`` in swebench's shape."""
        return {
            instance_id: {
                "patch_is_None": False,
                "patch_exists": self.patch_exists,
                "patch_successfully_applied": self.patch_applied,
                "resolved": self.resolved,
                "tests_status": self.tests_status,
            }
        }


@dataclass(frozen=True)
class LogVerdict:
    """What one test log says: resolved or not, and each test's status in swebench's buckets."""

    resolved: bool
    tests_status: dict[str, dict[str, list[str]]] = field(default_factory=dict)


class Harness(ABC):
    """Builds the eval script for an instance and grades the log it produces. Stateless: what it
    needs to know of a repository comes with the instance (or is the harness's own), never from what
    it graded before."""

    name: ClassVar[str]
    #: Where the repo lives inside task images.
    workdir: ClassVar[str] = "/testbed"
    #: The commands tried in turn to apply a patch (each given the patch file); None: swebench's ladder.
    apply_ladder: ClassVar[tuple[str, ...] | None] = None

    def patch_to_apply(self, patch: str) -> str:
        """The patch as the benchmark's own harness hands it to the apply (as given, by default)."""
        return patch

    def eval_script(self, instance: Instance) -> str:
        """A bash script that applies the test patch, runs the tests between swebench's markers."""
        return self._eval_script(instance)

    def grade_log(self, instance: Instance, test_output: str) -> LogVerdict:
        """The verdict swebench's rules give this log."""
        return self._grade_log(instance, test_output)

    def grade_log_file(self, instance: Instance, path: Path) -> LogVerdict:
        """The verdict for a log stored at ``path`` (undecodable bytes replaced); a harness whose
        grader reads logs from files itself is handed the path (``anyswe regrade``)."""
        return self.grade_log(instance, path.read_text(errors="replace"))

    def runs_pytest(self, instance: Instance) -> bool:
        """Whether ``instance``'s tests run under pytest (its grading then loads the record plugin of
        grading/testrecord and expects its record)."""
        return False

    def log_parser(self, instance: Instance) -> Parser | None:
        """The parser the verdict reads ``instance``'s log with, for one text at a time (the record's
        check reads the log line by line); None: it has none that reads lines."""
        return None

    def check_record(
        self, instance: Instance, test_output: str, record: RunRecord | None, *, expected: bool
    ) -> Check | None:
        """The log the verdict was read from against pytest's record of the run (None: no parser to
        read the log with); ``expected``: the run was to make a record."""
        from anyswe.grading import swebench as sb
        from anyswe.grading import testrecord

        parse = self.log_parser(instance)
        if parse is None:
            return None
        span = test_output
        if sb.START_TEST_OUTPUT in span and sb.END_TEST_OUTPUT in span:  # what swebench grades, as it cuts it
            span = span.split(sb.START_TEST_OUTPUT)[1].split(sb.END_TEST_OUTPUT)[0]
        if not parse(span):  # swebench's fallback: a marked span with no results, the whole log
            span = test_output
        tests = [*instance.FAIL_TO_PASS, *instance.PASS_TO_PASS]
        return testrecord.compare(span, parse, tests, record, expected=expected)

    @abstractmethod
    def _eval_script(self, instance: Instance) -> str: ...

    @abstractmethod
    def _grade_log(self, instance: Instance, test_output: str) -> LogVerdict: ...
