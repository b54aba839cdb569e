"""The driver's retry policy: a transient infra error is tried again within the apply, a permanent
one (a missing image, an image that is not the instance's) is reported at once.

The runner here stands in for the sandbox layer (it returns what a task's phases would have): the
policy is the driver's alone. The real paths are in tests/e2e (test_hermetic, test_grading_paths,
test_faults).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from pathlib import Path

import pytest

from anyswe.errors import ImageNotFound, InfraError, SandboxLost, WrongImage
from anyswe.execute.classify import failed_output
from anyswe.execute.local import _Driver
from anyswe.execute.progress import make_progress
from anyswe.execute.session import Session
from anyswe.execute.unit import TaskOutput, WorkUnit, make_unit
from anyswe.plan import make_plan
from anyswe.results.store import RunStore
from anyswe.spec import load_spec


class Failing:
    """A runner whose every unit ends with ``error``, as run_task would record it."""

    gateway_host = None

    def __init__(self, error: InfraError) -> None:
        self.error, self.runs = error, 0

    async def run(self, unit: WorkUnit) -> TaskOutput:
        self.runs += 1
        return failed_output(
            unit, "infra", f"{type(self.error).__name__}: {self.error}", permanent=self.error.permanent
        )

    async def check(self, units: Iterable[WorkUnit]) -> None: ...
    async def collect_orphans(self, task_keys: set[str]) -> list[str]:
        return []

    async def sweep(self, run_id: str) -> list[str]:
        return []

    async def close(self) -> None: ...


@pytest.mark.parametrize(
    ("error", "runs"),
    [
        (SandboxLost("killed from the host"), 3),
        (InfraError("a runtime hiccup"), 3),
        (ImageNotFound("no such image"), 1),
        (WrongImage("HEAD does not descend from the base commit"), 1),
        (InfraError("said permanent by its raiser", permanent=True), 1),
    ],
)
def test_only_transient_infra_errors_are_retried_within_the_apply(tmp_path: Path, error: InfraError, runs: int) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "name: r\ndataset: {name: demo, instance_ids: [demo__calc-1]}\nagents: {g: {type: gold}}\n"
        "providers: {d: {type: docker}}\nretries: {max_attempts: 3, backoff: 0}\n"
    )
    plan = make_plan(load_spec(spec))
    runner = Failing(error)
    with RunStore(tmp_path / "run") as store:
        driver = _Driver(plan, Session(runner, run_id="r", store=store), concurrency=1, progress=False)
        unit = make_unit(plan, plan.tasks[0], run_id="r", attempt=1)
        asyncio.run(driver.one(unit, make_progress(1, "r", enabled=False)))
        rows = store.results()
    assert runner.runs == runs and [r.attempt for r in rows] == list(range(1, runs + 1))
    assert all(r.error_permanent is error.permanent and r.mask_sample for r in rows)
    assert driver.permanent == (1 if error.permanent else 0)
