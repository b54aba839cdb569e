"""``anyswe grade RUN``: every recorded patch of a run graded again, live, each in a fresh sandbox.

What the offline ``anyswe regrade`` does for stored logs, this does for patches: each task's latest
attempt with a verdict (no infra, grading or internal error) has its recorded patch graded by
:func:`anyswe.grade`, on the task's own backend or on ``provider`` (another backend of the run's spec:
the same patches graded where they did not run). Grades are appended (fsynced) to
``RUN/regrade/<provider or "own">.jsonl`` as they come, so a regrade that stops resumes where it was.
Each row says the recorded verdict and the new one; those that differ are the ones to look at (a
harness or image that changed, a flaky test, a backend difference).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from anyswe.errors import InfraError, ResultsError
from anyswe.execute.triage import GradeStore

REGRADE_DIR = "regrade"


async def regrade_run_async(
    run_dir: str | Path, *, provider: str | None = None, concurrency: int = 4
) -> list[dict[str, Any]]:
    """One row per graded task: key, instance, cell, where it was graded, the recorded and the new
    verdict (None with ``error`` when the grade could not be made)."""
    from anyswe.execute.grade import grade_async
    from anyswe.plan import make_plan
    from anyswe.results.store import RESULTS, latest_attempts, read_results
    from anyswe.sandbox import get_provider
    from anyswe.spec import load_spec

    run = Path(run_dir)
    if not (run / RESULTS).is_file():
        raise ResultsError(f"no {RESULTS} in {run} (is it a run directory?)")
    plan = make_plan(load_spec(run / "spec.yaml"))
    if provider is not None and provider not in plan.spec.providers:
        known = ", ".join(plan.spec.providers)
        raise ResultsError(f"grade: {run}'s spec has no provider {provider!r} (it has {known})")
    tasks = [r for r in latest_attempts(read_results(run / RESULTS)) if r.error_kind in (None, "agent")]
    providers = {name: get_provider(cfg.type, cfg) for name, cfg in plan.spec.providers.items()}
    store = GradeStore(run / REGRADE_DIR, name=f"{provider or 'own'}.jsonl", what="graded")
    bound = asyncio.Semaphore(concurrency)

    async def one(task: Any) -> None:
        where = provider or task.provider
        row: dict[str, Any] = {
            "key": task.key,
            "instance_id": task.instance_id,
            "cell": task.cell,
            "graded_on": where,
            "recorded": task.resolved,
        }
        async with bound:
            try:
                verdict = await grade_async(
                    plan.instance(task.instance_id),
                    task.model_patch,
                    providers[where],
                    dataset=plan.dataset,
                    harness=task.harness,
                    timeout=plan.spec.timeouts.grading,
                )
            except InfraError as exc:  # no verdict: tried again by the next regrade
                store.append(row | {"resolved": None, "error": f"{type(exc).__name__}: {exc}"[:500]})
                return
        store.append(row | {"resolved": verdict.resolved, "applied_by": verdict.applied_by, "error": None})

    try:
        done = {g["key"] for g in store.rows() if g["resolved"] is not None}
        await asyncio.gather(*(one(t) for t in tasks if t.key not in done))
        graded = {g["key"]: g for g in store.rows()}  # the latest grade of each task
    finally:
        store.close()
    return sorted(graded.values(), key=lambda g: (g["cell"], g["instance_id"], g["key"]))


def regrade_run(run_dir: str | Path, **options: Any) -> list[dict[str, Any]]:
    """:func:`regrade_run_async` from synchronous code (a script, or a Jupyter cell)."""
    from anyswe._sync import run_sync

    return run_sync(regrade_run_async(run_dir, **options))
