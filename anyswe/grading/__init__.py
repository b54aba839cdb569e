"""Grading: harnesses registered by name, the patch-apply ladder, swebench behind one adapter.

Agents never import this package (a test checks it): grading is the host's business.
"""

from __future__ import annotations

from collections.abc import Callable

from anyswe.errors import DatasetError
from anyswe.grading.base import Harness, Verdict

__all__ = ["Harness", "Verdict", "get_harness", "harness_names", "register_harness"]

_HARNESSES: dict[str, Callable[[], Harness]] = {}


def register_harness(name: str, factory: Callable[[], Harness]) -> None:
    """Register a harness under ``name``; ``factory`` is called on first use."""
    _HARNESSES[name] = factory


def harness_names() -> list[str]:
    return sorted(_HARNESSES)


def get_harness(name: str) -> Harness:
    try:
        return _HARNESSES[name]()
    except KeyError:
        raise DatasetError(f"unknown grading harness {name!r}; known: {', '.join(harness_names())}") from None


def _pytest() -> Harness:
    from anyswe.grading.pytest import PytestHarness

    return PytestHarness()


def _swebench() -> Harness:
    from anyswe.grading.swebench_harness import SWEbenchHarness

    return SWEbenchHarness()


def _r2e() -> Harness:
    from anyswe.grading.r2e import R2EHarness

    return R2EHarness()


register_harness("pytest", _pytest)
register_harness("r2e", _r2e)
register_harness("swebench", _swebench)
