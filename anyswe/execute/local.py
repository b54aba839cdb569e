"""The local executor: asyncio, a bound on tasks in flight, and one provider object per provider.

Ctrl-C (cancellation) stops launching, tears down running sandboxes (their teardown is shielded)
and keeps every finished row, which was fsynced as it finished.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from anyswe.agents import agent_class
from anyswe.execute.progress import make_progress
from anyswe.execute.task import TaskEnv, run_task
from anyswe.images.resolve import ImageResolver
from anyswe.plan import Plan
from anyswe.results.export import export_run
from anyswe.results.store import RunStore
from anyswe.sandbox import get_provider


@dataclass
class RunSummary:
    run_dir: Path
    planned: int
    skipped: int
    ran: int
    resolved: int
    errors: int

    def __str__(self) -> str:
        return (
            f"{self.run_dir}: {self.planned} tasks planned, {self.skipped} already done, {self.ran} run "
            f"({self.resolved} resolved, {self.errors} with errors)"
        )


def _provider_config(plan: Plan, name: str) -> dict[str, Any]:
    spec = plan.spec.providers[name]
    cfg = spec.model_dump(exclude={"image", "sif"})
    cfg["startup_timeout"] = plan.spec.timeouts.sandbox_start
    return cfg


async def execute(plan: Plan, run_dir: Path, *, concurrency: int | None = None, progress: bool = True) -> RunSummary:
    """Run every task of ``plan`` not already done in ``run_dir``."""
    with RunStore(run_dir) as store:
        store.write_text("spec.yaml", plan.spec.resolved_yaml())
        store.write_text("plan.json", json.dumps(plan.to_json(), indent=1) + "\n")
        done = store.done_keys()
        pending = [t for t in plan.tasks if t.key not in done]
        used = {t.cell.provider for t in pending}
        env = TaskEnv(
            plan=plan,
            store=store,
            providers={
                name: get_provider(plan.spec.providers[name].type, _provider_config(plan, name)) for name in used
            },
            agents={
                name: agent_class(cfg.type)(cfg)
                for name, cfg in plan.spec.agents.items()
                if any(t.cell.agent == name for t in pending)
            },
            images=ImageResolver(plan),
            run_id=uuid.uuid4().hex[:12],
            attempts=store.attempts(),
        )
        for p in env.providers.values():
            await p.check()
        slots = asyncio.Semaphore(concurrency or plan.spec.concurrency)
        bar = make_progress(len(pending), plan.spec.name, enabled=progress)
        resolved = errors = 0

        async def one(task: Any) -> None:
            nonlocal resolved, errors
            async with slots:
                row = await run_task(env, task)
            store.append(row)
            resolved += bool(row["resolved"])
            errors += row["error_kind"] is not None
            bar.advance(row)

        try:
            async with asyncio.TaskGroup() as group:
                for task in pending:
                    group.create_task(one(task))
        finally:
            bar.close()
            store.write_aggregates()
            export_run(run_dir)
    return RunSummary(run_dir, len(plan.tasks), len(plan.tasks) - len(pending), len(pending), resolved, errors)
