"""Harnesses: how one dataset's instances are tested and their logs turned into verdicts."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from anyswe.datasets.instance import Instance


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


class Harness(ABC):
    """Builds the eval script for an instance and grades the log it produces."""

    name: ClassVar[str]
    #: Where the repo lives inside task images.
    workdir: ClassVar[str] = "/testbed"

    def prepare(self, instance: Instance) -> None:  # noqa: B027 - optional hook
        """Register whatever the grader needs to know about ``instance`` (called before grading)."""

    @abstractmethod
    def eval_script(self, instance: Instance) -> str:
        """A bash script that applies the test patch, runs the tests between swebench's markers."""

    @abstractmethod
    def grade_log(self, instance: Instance, test_output: str) -> dict[str, Any]:
        """swebench's report entry for this log: ``resolved``, ``tests_status``, ..."""
