"""``anyswe gold-check``: which instances the grader cannot resolve even with the reference patch.

The gold agent runs over the spec's instances on each of its providers, as an ordinary anyswe run
(resumable, in its own run directory). An instance whose gold patch does not resolve on *some*
provider goes into an exclusion list, with the tests that failed on each provider; a spec names
that list (``dataset.exclude_file``) so the broken instance is left out on every backend alike.
A task that ended in an infrastructure error says nothing about the instance: it is reported as
unchecked (apply again), never excluded.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from anyswe.datasets.exclusions import ExcludedInstance, ExclusionList
from anyswe.errors import PlanError

if TYPE_CHECKING:
    from anyswe.execute.local import RunSummary
    from anyswe.spec import Spec


@dataclass
class GoldCheck:
    """The outcome per instance and provider, and the exclusion list made from it."""

    run_dir: Path
    providers: list[str]
    #: instance_id -> provider -> "resolved" | "unresolved" | "error: ..." (infra: not checked)
    outcome: dict[str, dict[str, str]] = field(default_factory=dict)
    exclusions: ExclusionList = field(default_factory=ExclusionList)
    summary: RunSummary | None = None

    @property
    def unchecked(self) -> list[tuple[str, str]]:
        """(instance, provider) pairs without a verdict (an infrastructure error): apply again."""
        return [(i, p) for i, per in self.outcome.items() for p, v in per.items() if v.startswith("error")]

    def rows(self) -> list[dict[str, Any]]:
        return [{"instance_id": i, **per} for i, per in sorted(self.outcome.items())]


def gold_spec(spec: Spec, *, providers: list[str] | None = None, run_dir: Path | None = None) -> Spec:
    """``spec`` with the gold agent alone, one sample, every instance (its exclusions lifted), on ``providers``."""
    from anyswe.agents.gold import GoldConfig
    from anyswe.spec import MatrixSpec

    chosen = providers or spec.matrix.providers or list(spec.providers)
    unknown = [p for p in chosen if p not in spec.providers]
    if unknown:
        raise PlanError(
            f"gold-check: unknown provider(s) {', '.join(unknown)}; the spec declares {', '.join(spec.providers)}"
        )
    name = f"{spec.name}-gold-check"
    return spec.model_copy(
        update={
            "name": name,
            "agents": {"gold": GoldConfig()},
            "models": {},
            "matrix": MatrixSpec(providers=chosen),
            "samples": 1,
            "dataset": spec.dataset.model_copy(update={"exclude": [], "exclude_file": None}),
            "output_dir": run_dir or spec.run_dir().parent / name,
        }
    )


def _failing_tests(task_dir: Path) -> list[str]:
    report = task_dir / "report.json"
    if not report.is_file():
        return []
    data = json.loads(report.read_text())
    out: list[str] = []
    for entry in data.values() if isinstance(data, dict) else []:
        status = entry.get("tests_status") or {}
        for kind in ("FAIL_TO_PASS", "PASS_TO_PASS"):
            out += list((status.get(kind) or {}).get("failure") or [])
    return out


async def gold_check_async(
    spec: Spec,
    *,
    providers: list[str] | None = None,
    run_dir: Path | None = None,
    concurrency: int | None = None,
    progress: bool = True,
) -> GoldCheck:
    """Run the gold agent (resuming a previous check) and derive the exclusion list."""
    from anyswe.experiment import Experiment
    from anyswe.results.store import latest_attempts, read_results

    checked = gold_spec(spec, providers=providers, run_dir=run_dir)
    exp = Experiment(checked)
    summary = await exp.run_async(concurrency=concurrency, progress=progress)
    chosen = list(checked.matrix.providers or [])
    result = GoldCheck(run_dir=exp.run_dir, providers=chosen, summary=summary)
    planned = {t.key for t in exp.planned.tasks}
    rows = [r for r in latest_attempts(read_results(exp.run_dir / "results.jsonl")) if r.key in planned]
    failing: dict[str, dict[str, list[str]]] = {}
    for r in rows:
        if r.error_kind in ("infra", "internal", "grading") or r.mask_sample:
            # No verdict on the instance: the infrastructure, the grader or a timeout got in the way.
            verdict = f"error: {r.error_kind or 'masked (timeout)'}"
        elif r.resolved:
            verdict = "resolved"
        else:
            verdict = "unresolved"
            why = _failing_tests(exp.run_dir / "tasks" / r.key)
            if not r.patch_applied:
                why = why or ["(the gold patch did not apply)"]
            failing.setdefault(r.instance_id, {})[r.provider] = why
        result.outcome.setdefault(r.instance_id, {})[r.provider] = verdict
    entries = []
    for iid, per in sorted(failing.items()):
        where = ", ".join(sorted(per))
        entries.append(ExcludedInstance(instance_id=iid, reason=f"gold patch does not resolve on {where}", failing=per))
    result.exclusions = ExclusionList(
        dataset=exp.planned.dataset.name, checked_on=chosen, source=str(exp.run_dir), exclude=entries
    )
    return result


__all__ = ["GoldCheck", "gold_check_async", "gold_spec"]
