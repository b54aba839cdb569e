"""anyswe: run agents x models x sandbox providers over SWE-bench-style tasks, grade inline, compare.

The public API is re-exported here and imported lazily, so ``import anyswe`` stays cheap (polars,
docker and swebench load only when used).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from anyswe.errors import (
    AgentError,
    AnysweError,
    DatasetError,
    GradingError,
    ImageBuildError,
    ImageNotFound,
    InfraError,
    PlanError,
    ResultsError,
    RuntimeNotAvailable,
    SandboxError,
    SandboxExecError,
    SandboxStartError,
    SpecError,
)

if TYPE_CHECKING:
    from anyswe.sandbox import ExecResult, Sandbox, SandboxProvider, get_provider

__version__ = "0.1.0"

_LAZY = {
    "ExecResult": "anyswe.sandbox",
    "Sandbox": "anyswe.sandbox",
    "SandboxProvider": "anyswe.sandbox",
    "get_provider": "anyswe.sandbox",
}

__all__ = [
    "AgentError",
    "AnysweError",
    "DatasetError",
    "ExecResult",
    "GradingError",
    "ImageBuildError",
    "ImageNotFound",
    "InfraError",
    "PlanError",
    "ResultsError",
    "RuntimeNotAvailable",
    "Sandbox",
    "SandboxError",
    "SandboxExecError",
    "SandboxProvider",
    "SandboxStartError",
    "SpecError",
    "get_provider",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'anyswe' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
