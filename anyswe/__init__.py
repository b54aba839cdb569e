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
    InsufficientDisk,
    PlanError,
    ResultsError,
    RuntimeNotAvailable,
    SandboxError,
    SandboxExecError,
    SandboxStartError,
    SpecError,
)

if TYPE_CHECKING:
    from anyswe.datasets import load_dataset
    from anyswe.execute.grade import grade, grade_async
    from anyswe.execute.rollout import Rollouts, rollout, rollout_async
    from anyswe.execute.sample import Rollout
    from anyswe.execute.triage import Triage, triage, triage_async
    from anyswe.experiment import Experiment
    from anyswe.grading import Verdict
    from anyswe.prepare import gold_check, prepare_dataset, prepare_images
    from anyswe.results.atif import export_atif
    from anyswe.results.compare import compare_by, compare_cells, compare_runs
    from anyswe.results.tables import cell_table, instance_matrix, repo_table, task_frame
    from anyswe.sandbox import ExecResult, Sandbox, SandboxProvider, get_provider
    from anyswe.spec import Spec, load_spec

__version__ = "0.1.0"

_LAZY = {
    "Experiment": "anyswe.experiment",
    "grade": "anyswe.execute.grade",
    "grade_async": "anyswe.execute.grade",
    "rollout": "anyswe.execute.rollout",
    "rollout_async": "anyswe.execute.rollout",
    "Rollout": "anyswe.execute.sample",
    "Rollouts": "anyswe.execute.rollout",
    "triage": "anyswe.execute.triage",
    "triage_async": "anyswe.execute.triage",
    "Triage": "anyswe.execute.triage",
    "Verdict": "anyswe.grading",
    "Spec": "anyswe.spec",
    "load_spec": "anyswe.spec",
    "load_dataset": "anyswe.datasets",
    "export_atif": "anyswe.results.atif",
    "compare_by": "anyswe.results.compare",
    "compare_runs": "anyswe.results.compare",
    "compare_cells": "anyswe.results.compare",
    "instance_matrix": "anyswe.results.tables",
    "cell_table": "anyswe.results.tables",
    "repo_table": "anyswe.results.tables",
    "task_frame": "anyswe.results.tables",
    "ExecResult": "anyswe.sandbox",
    "Sandbox": "anyswe.sandbox",
    "SandboxProvider": "anyswe.sandbox",
    "get_provider": "anyswe.sandbox",
    "prepare_dataset": "anyswe.prepare",
    "prepare_images": "anyswe.prepare",
    "gold_check": "anyswe.prepare",
}

__all__ = [
    "AgentError",
    "AnysweError",
    "DatasetError",
    "ExecResult",
    "Experiment",
    "GradingError",
    "ImageBuildError",
    "ImageNotFound",
    "InfraError",
    "InsufficientDisk",
    "PlanError",
    "ResultsError",
    "Rollout",
    "Rollouts",
    "RuntimeNotAvailable",
    "Sandbox",
    "SandboxError",
    "SandboxExecError",
    "SandboxProvider",
    "SandboxStartError",
    "Spec",
    "SpecError",
    "Triage",
    "Verdict",
    "cell_table",
    "compare_by",
    "compare_cells",
    "compare_runs",
    "export_atif",
    "get_provider",
    "gold_check",
    "grade",
    "grade_async",
    "instance_matrix",
    "load_dataset",
    "load_spec",
    "prepare_dataset",
    "prepare_images",
    "repo_table",
    "rollout",
    "rollout_async",
    "task_frame",
    "triage",
    "triage_async",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'anyswe' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
