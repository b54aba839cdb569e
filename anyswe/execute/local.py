"""The local executor: asyncio, a bound on tasks in flight, units of work run by one in-process worker.

It takes the same path a distributed executor will: each pending task becomes a picklable
:class:`WorkUnit`, a :class:`Worker` runs it and returns a :class:`TaskOutput`, and only this
driver writes the run directory (artefacts first, then the fsynced result row).

Ctrl-C (cancellation) stops launching, tears down running sandboxes (their teardown is shielded)
and keeps every finished row, which was fsynced as it finished.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import uuid
from dataclasses import dataclass
from pathlib import Path

from anyswe.errors import ResultsError
from anyswe.execute.progress import Progress, make_progress
from anyswe.execute.runner import make_runner
from anyswe.execute.session import Session
from anyswe.execute.unit import TaskOutput, WorkUnit, make_unit
from anyswe.plan import Plan
from anyswe.results.export import export_run
from anyswe.results.store import RunStore
from anyswe.sandbox.slots import SharedBound


@dataclass
class RunSummary:
    run_dir: Path
    planned: int
    skipped: int
    ran: int
    resolved: int
    errors: int
    #: Tasks of this apply that ended with an error, by error kind (infra, internal, grading, agent).
    error_kinds: dict[str, int] = dataclasses.field(default_factory=dict)
    #: Of the infra errors, those no attempt can change (a missing image, one not the instance's).
    permanent: int = 0

    def __str__(self) -> str:
        kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(self.error_kinds.items()))
        if self.permanent:
            kinds += f" ({self.permanent} infra permanent: fix the image, then apply again)"
        return (
            f"{self.run_dir}: {self.planned} tasks planned, {self.skipped} already done, {self.ran} run "
            f"({self.resolved} resolved, {self.errors} with errors{': ' + kinds if kinds else ''})"
        )

    @property
    def incomplete(self) -> bool:
        """Whether the run needs another look: a task's verdict is missing (an infra, internal or grading
        error: apply again), or every task it ran failed."""
        unverdicted = sum(n for kind, n in self.error_kinds.items() if kind != "agent")
        return unverdicted > 0 or (self.ran > 0 and self.errors == self.ran)


def pending_units(plan: Plan, store: RunStore, run_id: str) -> list[WorkUnit]:
    """A unit of work for every task of ``plan`` not already done in ``store``."""
    done = store.done_keys()
    attempts = store.attempts()
    return [
        make_unit(plan, t, run_id=run_id, attempt=attempts.get(t.key, 0) + 1) for t in plan.tasks if t.key not in done
    ]


class _Driver:
    """One apply: launches units under the concurrency bound, retries infra errors, counts what was recorded;
    each attempt is the session's (grant, run, settle, record)."""

    def __init__(
        self, plan: Plan, session: Session, concurrency: int, progress: bool, *, by_provider: bool = True
    ) -> None:
        if session.store is None:
            raise ValueError("an apply records into its run directory: the session needs its store")
        self.plan, self.session, self.store = plan, session, session.store
        # Each provider's own bound is waited for before a place in the run's (a matrix's tasks come
        # cell by cell); on Ray the cluster's resources bound each provider type.
        self.slots = SharedBound(concurrency, per_provider=by_provider)
        self.progress = progress
        self.resolved = self.errors = 0
        self.kinds: dict[str, int] = {}
        self.permanent = 0

    async def attempt(self, unit: WorkUnit) -> TaskOutput:
        async with self.slots.place(unit.cell.provider, unit.provider.concurrency):  # one config per name
            with self.session.task_dir(unit) as task_dir:
                output = await self.session.attempt(unit, task_dir)
        # The summary counts the row as written (one that could not be recorded is an error).
        return await self.session.record(output)

    async def one(self, unit: WorkUnit, bar: Progress) -> None:
        retry = self.plan.spec.retries
        for n in range(1, retry.max_attempts + 1):
            try:
                output = await self.attempt(unit)
            except OSError as exc:  # the run directory itself refuses writes (a full disk): stop the run
                raise ResultsError(f"cannot write to {self.store.run_dir}: {exc}") from exc
            # A permanent infra error (a missing image, one that is not the instance's) is the same on
            # every attempt: reported at once.
            if output.result.error_kind != "infra" or output.result.error_permanent or n == retry.max_attempts:
                break
            # Every attempt keeps its row; the backoff waits outside the concurrency bound.
            await asyncio.sleep(retry.backoff * 2 ** (n - 1))
            unit = dataclasses.replace(unit, attempt=unit.attempt + 1)
        result = output.result
        self.resolved += result.resolved
        if result.error_kind is not None:
            self.errors += 1
            self.kinds[result.error_kind] = self.kinds.get(result.error_kind, 0) + 1
            self.permanent += result.error_permanent
        bar.advance(result)

    async def run(self, units: list[WorkUnit]) -> None:
        bar = make_progress(len(units), self.plan.spec.name, enabled=self.progress)
        try:
            if any(u.model is not None for u in units):
                await self.session.start_gateway()  # a port that cannot be had stops the run before any task
            async with asyncio.TaskGroup() as group:
                for unit in units:
                    group.create_task(self.one(unit, bar))
        except BaseExceptionGroup as group_error:
            # Only what stops the whole run gets here (a task's own failure is its row): the first
            # cause, plainly, so callers see a ResultsError rather than a group.
            raise _first_leaf(group_error) from group_error
        finally:
            bar.close()


def _first_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException:
    first = group.exceptions[0]
    return _first_leaf(first) if isinstance(first, BaseExceptionGroup) else first


async def execute(
    plan: Plan,
    run_dir: Path,
    *,
    concurrency: int | None = None,
    progress: bool = True,
    executor: str | None = None,
    address: str | None = None,
) -> RunSummary:
    """Run every task of ``plan`` not already done in ``run_dir``, here (``local``) or on Ray (``ray``)."""
    kind = executor or plan.spec.executor.type
    with RunStore(run_dir) as store:
        store.write_text("spec.yaml", plan.spec.resolved_yaml())
        store.write_text("plan.json", json.dumps(plan.to_json(), indent=1) + "\n")
        run_id = uuid.uuid4().hex[:12]
        units = pending_units(plan, store, run_id)
        local_bound = concurrency or plan.spec.concurrency
        runner = make_runner(
            kind,
            address or plan.spec.executor.address,
            {u.provider.type: local_bound for u in units},
            plan.spec.executor.gateway_host,
        )
        session = Session(runner, run_id=run_id, store=store, gateway_port=plan.spec.executor.gateway_port)
        bound = local_bound if runner.bounded_by_driver else max(1, len(units))
        driver = _Driver(plan, session, bound, progress, by_provider=runner.bounded_by_driver)
        finished = False
        try:
            await runner.check(units)
            await runner.collect_orphans({t.key for t in plan.tasks})
            await driver.run(units)
            finished = True
        finally:
            await asyncio.shield(session.close())
            _summarise(store, run_dir, raise_errors=finished)
    done = len(plan.tasks) - len(units)
    return RunSummary(
        run_dir, len(plan.tasks), done, len(units), driver.resolved, driver.errors, driver.kinds, driver.permanent
    )


def _summarise(store: RunStore, run_dir: Path, *, raise_errors: bool) -> None:
    """Per-cell aggregates and exports; when the run already failed, its own error is the one to see."""
    try:
        store.write_aggregates()
        export_run(run_dir)
    except OSError as exc:
        if raise_errors:
            raise ResultsError(f"the run's results are kept, but its summaries could not be written: {exc}") from exc
