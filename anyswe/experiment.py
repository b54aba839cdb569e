"""The Python face of anyswe: ``Experiment.load(path).run()``, in scripts and in Jupyter alike."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from anyswe._sync import run_sync
from anyswe.execute.local import RunSummary, execute
from anyswe.plan import Plan, make_plan
from anyswe.spec import Spec, load_spec

if TYPE_CHECKING:
    import polars as pl

    from anyswe.execute.triage import Triage


class Experiment:
    """A loaded spec, its plan and its run directory."""

    def __init__(self, spec: Spec, *, run_dir: str | Path | None = None) -> None:
        self.spec = spec
        self.run_dir = Path(run_dir) if run_dir is not None else spec.run_dir()
        self._plan: Plan | None = None

    @classmethod
    def load(
        cls, path: str | Path, *, overrides: list[str] | tuple[str, ...] = (), run_dir: str | Path | None = None
    ) -> Experiment:
        """Load a spec file; ``overrides`` are ``a.b=c`` strings as with ``--set``."""
        return cls(load_spec(path, overrides), run_dir=run_dir)

    @property
    def planned(self) -> Plan:
        if self._plan is None:
            self._plan = make_plan(self.spec)
        return self._plan

    def plan(self) -> pl.DataFrame:
        """One row per task: key, cell, agent, model, provider, instance_id, sample."""
        import polars as pl

        return pl.DataFrame([t.row() for t in self.planned.tasks])

    async def run_async(
        self,
        *,
        concurrency: int | None = None,
        progress: bool = True,
        executor: str | None = None,
        address: str | None = None,
    ) -> RunSummary:
        return await execute(
            self.planned, self.run_dir, concurrency=concurrency, progress=progress, executor=executor, address=address
        )

    def run(
        self,
        *,
        concurrency: int | None = None,
        progress: bool = True,
        executor: str | None = None,
        address: str | None = None,
    ) -> RunSummary:
        """Run every task not yet done in the run directory (works inside Jupyter's event loop too).

        ``executor`` is ``local`` (the default, or the spec's ``executor.type``) or ``ray``, with the
        cluster's ``address`` (``auto``: the one running on this machine).
        """
        return run_sync(self.run_async(concurrency=concurrency, progress=progress, executor=executor, address=address))

    def results(self) -> pl.DataFrame:
        """One row per task (its latest attempt)."""
        from anyswe.results.tables import task_frame

        return task_frame(self.run_dir)

    def excluded(self) -> dict[str, str]:
        """Instances the spec excludes on every provider (``dataset.exclude``/``exclude_file``): id -> reason."""
        return dict(self.planned.excluded)

    def triage(self, *, by: str = "provider", k: int = 5, concurrency: int = 4) -> Triage:
        """What each flip between cells differing in ``by`` is (flaky, backend-systematic, agent
        variance): its patches graded ``k`` more times on both backends, resumably, in the run
        directory (:mod:`anyswe.execute.triage`)."""
        from anyswe.execute.triage import triage_async

        return run_sync(triage_async(self.run_dir, by=by, k=k, concurrency=concurrency))

    def cells(self) -> pl.DataFrame:
        """The per-cell table: resolve rate (every task that ran and ended), masked, RL rate (unmasked
        samples), patch rate, phase times."""
        from anyswe.results.tables import cell_table

        return cell_table(self.results())
