"""Grading: harnesses registered by name, routing of instances to them, the patch-apply ladder,
swebench behind one adapter.

Which harness grades an instance is decided here and nowhere else: the spec's ``grading.harness``
if set, otherwise the dataset's own, and ``auto`` routes each instance (R2E-Gym rows, repos
swebench knows, otherwise the generic pytest harness). Agents never import this package (a test
checks it): grading is the host's business.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

from anyswe.errors import DatasetError
from anyswe.grading.base import Harness, LogVerdict, Verdict
from anyswe.registry import Registry

if TYPE_CHECKING:
    from anyswe.datasets.instance import Instance

__all__ = [
    "HARNESSES",
    "Harness",
    "LogVerdict",
    "Verdict",
    "get_harness",
    "harness_for",
    "harness_names",
    "register_harness",
    "route_instance",
]

HARNESSES: Registry[Harness] = Registry("grading harness", Harness, group="anyswe.harnesses", error=DatasetError)
HARNESSES.register("pytest", "anyswe.grading.pytest:PytestHarness")
HARNESSES.register("r2e", "anyswe.grading.r2e:R2EHarness")
HARNESSES.register("swebench", "anyswe.grading.swebench_harness:SWEbenchHarness")
HARNESSES.register("swebench-pro", "anyswe.grading.pro:ProHarness")


def register_harness(name: str, target: str | type[Harness]) -> None:
    """Register a harness class (or ``"module:Class"``) under ``name``."""
    HARNESSES.register(name, target)
    get_harness.cache_clear()


def harness_names() -> list[str]:
    return sorted(HARNESSES.names())


@cache
def get_harness(name: str) -> Harness:
    """The (one, per process) harness called ``name``: a registered name or ``module:Class``."""
    return HARNESSES.load(name)()


def route_instance(instance: Instance) -> str:
    """``auto`` for one instance: R2E-Gym rows carry ``expected_output_json``; repos swebench knows use swebench."""
    extra = instance.model_extra or {}
    if "expected_output_json" in extra:
        return "r2e"
    if "swebench_spec" in extra:
        return "swebench"
    from anyswe.grading import swebench as sb

    return "swebench" if sb.known_repo(instance.repo) else "pytest"


def harness_for(instance: Instance, *, spec_harness: str | None, dataset_harness: str) -> str:
    """The harness that grades ``instance``: the spec's choice, else the dataset's; ``auto`` routed per instance."""
    name = spec_harness or dataset_harness
    return route_instance(instance) if name == "auto" else name
