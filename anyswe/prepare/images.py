"""``anyswe prepare images``: every image a spec's plan needs, made ready before the run.

Phases in order. *image*: each instance image is pulled into the local store (sandbox/store.py) or
built (by its dataset, or with ``build`` as swebench builds it), skipping those present, in parallel
up to a bound, retrying transient registry failures. Then each provider's own artefacts (its
:class:`~anyswe.sandbox.artefacts.ArtefactKind`: apptainer's SIFs), made from the store or from the
registry, into the paths its config names or into its own cache, as a run would make them.

Before any work, the disk needed is estimated per filesystem (sizes from the registry manifest or
the store; each kind says what its artefact takes and where) and the whole preparation is refused
when a filesystem lacks the room. One image failing is reported and does not stop the others; a
provider's artefact whose image failed is skipped.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from anyswe.config import base_image
from anyswe.datasets import format_image, image_builder, image_fields
from anyswe.errors import AnysweError, DatasetError
from anyswe.prepare.disk import check_disk, estimate
from anyswe.sandbox.artefacts import STORE_PHASE, ArtefactKind, ImageJob, MakeOptions
from anyswe.sandbox.store import build_image, pull_image, store_answers, store_unavailable

if TYPE_CHECKING:
    from anyswe.datasets.registry import Benchmark
    from anyswe.plan import Plan

ArtefactSource = Literal["auto", "registry", "daemon"]


@dataclass
class PrepareReport:
    """What ``prepare_images`` did, per artefact, and the disk estimate it checked."""

    jobs: list[ImageJob]
    disk: list[dict[str, Any]] = field(default_factory=list)

    @property
    def failed(self) -> list[ImageJob]:
        return [j for j in self.jobs if j.status == "failed"]

    def rows(self) -> list[dict[str, Any]]:
        return [j.row() for j in self.jobs]

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for j in self.jobs:
            out[j.status] = out.get(j.status, 0) + 1
        return out

    def reasons(self) -> dict[str, int]:
        """Images that cannot be built here, per kind of reason."""
        out: dict[str, int] = {}
        for j in self.jobs:
            if j.reason:
                out[j.reason] = out.get(j.reason, 0) + 1
        return dict(sorted(out.items()))

    def __str__(self) -> str:
        return ", ".join(f"{n} {s}" for s, n in sorted(self.counts().items())) or "nothing to prepare"


# -- what the plan needs ---------------------------------------------------------------------------


def image_jobs(
    plan: Plan, *, artefact_source: ArtefactSource = "auto", store_available: bool = True, build: bool = False
) -> list[ImageJob]:
    """The artefacts ``plan`` needs, one per image reference and one per provider artefact (its
    kind's key), images first, in plan order (``build``: template-named images are built, not
    pulled, and the providers' artefacts made from the store)."""
    from anyswe.images.resolve import ImageSource

    store_jobs: dict[str, ImageJob] = {}
    own: dict[tuple[str, str], ImageJob] = {}
    builder: Benchmark | None = None
    from_registry = not build and (artefact_source == "registry" or (artefact_source == "auto" and not store_available))
    for name in dict.fromkeys(c.provider for c in plan.cells):
        cfg = plan.spec.providers[name]
        source = ImageSource.choose(plan.dataset, cfg)
        for inst in plan.instances:
            if source.build_dataset is not None:
                _, ref = image_builder(source.build_dataset)(inst.instance_id, base_image())
            elif source.template is not None:
                ref = format_image(source.template, inst)
            else:
                continue
            built_here = build and source.build_dataset is None
            if built_here and builder is None:
                builder = _offline_builder(plan)
            needs = cfg.prepared_artefacts(image_fields(inst), from_registry=from_registry)
            if needs.store_image:
                job = store_jobs.setdefault(
                    ref, ImageJob(STORE_PHASE, ref, ref, inst.instance_id, build_dataset=source.build_dataset)
                )
                job.build_instance, job.build_by = (inst, builder) if built_here else (None, None)
                job.providers.add(name)
            if needs.kind is not None:
                key = (needs.kind.phase, needs.kind.key(needs, ref))
                made = own.setdefault(
                    key,
                    ImageJob(
                        needs.kind.phase,
                        ref,
                        needs.target,
                        inst.instance_id,
                        from_registry=needs.from_registry,
                        kind=needs.kind,
                    ),
                )
                made.build_instance, made.build_by = (inst, builder) if built_here else (None, None)
                made.providers.add(name)
    return [*store_jobs.values(), *own.values()]


def _offline_builder(plan: Plan) -> Benchmark:
    """The benchmark whose own recipe builds the plan's images offline (``--build``)."""
    from anyswe.datasets.registry import route

    try:
        bench = route(plan.dataset.name)
    except DatasetError:
        bench = None
    if bench is None or not bench.builds_offline():
        raise DatasetError(
            f"--build: dataset {plan.dataset.name!r} has no recipe that builds its images offline; name the "
            "benchmark its rows are of in the dataset block (name: swe-bench-verified, path: rows.jsonl)"
        )
    return bench


async def _store_job(job: ImageJob, options: MakeOptions, repo_mirror: Path | None) -> None:
    if job.build_dataset is not None:
        dockerfile, tag = image_builder(job.build_dataset)(job.instance_id, base_image())
        await build_image(dockerfile, tag)
        job.status = "built"
    elif job.build_instance is not None and job.build_by is not None:
        summary = await job.build_by.build_instance(job.build_instance, repo_mirror or Path())
        job.status, job.note = "built", summary
    else:
        await pull_image(job.ref, attempts=options.attempts, backoff=options.backoff)
        job.status = "pulled"


def _refuse_unbuildable(jobs: list[ImageJob], repo_mirror: Path, dry_run: bool) -> None:
    """Each image to build that its benchmark says cannot be built here fails by name before any build
    (a dry run: ``unbuildable``, or ``buildable``); the providers' artefacts of its image are skipped."""
    refused: dict[str, ImageJob] = {}
    for job in jobs:
        if job.status != "pending" or job.build_instance is None or job.build_by is None:
            continue
        why = job.build_by.unbuildable(job.build_instance, repo_mirror)
        if why is None:
            job.status = "buildable" if dry_run else job.status
            continue
        job.status = "unbuildable" if dry_run else "failed"
        job.reason, job.error = why
        refused[job.ref] = job
    for job in jobs:
        if job.kind is not None and job.ref in refused and job.status == "pending":
            job.status, job.error = "skipped", f"its image cannot be built here: {refused[job.ref].reason}"


# -- progress ----------------------------------------------------------------------------------------


class _PhaseProgress:
    """A bar per phase: rich in a terminal, tqdm in Jupyter, a line per artefact otherwise."""

    def __init__(self, title: str, total: int, enabled: bool) -> None:
        from anyswe.execute.progress import in_jupyter

        self.title, self.total, self.done = title, total, 0
        self._rich: Any = None
        self._bar: Any = None
        if not enabled:
            self.mode = "off"
        elif in_jupyter():
            from tqdm.auto import tqdm

            self.mode, self._bar = "jupyter", tqdm(total=total, desc=title)
        elif sys.stderr.isatty():
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._rich = Progress(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()
            )
            self._task = self._rich.add_task(title, total=total)
            self._rich.start()
            self.mode = "rich"
        else:
            self.mode = "lines"

    def advance(self, job: ImageJob) -> None:
        self.done += 1
        if self.mode == "rich":
            self._rich.update(self._task, advance=1)
        elif self.mode == "jupyter":
            self._bar.update(1)
        elif self.mode == "lines":
            what = job.target or job.ref
            tail = f": {job.error[-200:]}" if job.status == "failed" else ""
            print(f"[{self.title} {self.done}/{self.total}] {what}: {job.status}{tail}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.mode == "rich":
            self._rich.stop()
        elif self.mode == "jupyter":
            self._bar.close()


# -- the whole preparation -------------------------------------------------------------------------


async def _make_artefact(job: ImageJob, options: MakeOptions) -> None:
    assert job.kind is not None  # only jobs of a provider's kind are in an artefact phase
    await job.kind.make(job, options)


async def _run_phase(
    title: str,
    jobs: list[ImageJob],
    bound: int,
    make: Callable[[ImageJob], Awaitable[None]],
    progress: bool,
) -> None:
    todo = [j for j in jobs if j.status == "pending"]
    if not todo:
        return
    bar = _PhaseProgress(title, len(todo), progress)
    gate = asyncio.Semaphore(bound)

    async def one(job: ImageJob) -> None:
        async with gate:
            t0 = time.monotonic()
            try:
                await make(job)
            except AnysweError as exc:
                job.status, job.error = "failed", str(exc)
            except Exception as exc:  # one image's failure must not stop the others
                job.status, job.error = "failed", f"{type(exc).__name__}: {exc}"
            job.seconds = time.monotonic() - t0
            bar.advance(job)

    try:
        await asyncio.gather(*(one(j) for j in todo))
    finally:
        bar.close()


async def prepare_images_async(
    plan: Plan,
    *,
    jobs: int = 4,
    artefact_jobs: int = 2,
    artefact_source: ArtefactSource = "auto",
    disk_budget: int | None = None,
    retries: int = 3,
    backoff: float = 5.0,
    timeout: float = 3600,
    progress: bool = True,
    dry_run: bool = False,
    build: bool = False,
    repo_mirror: Path | None = None,
) -> PrepareReport:
    """Pull, build and convert what ``plan`` needs; see the module docstring. ``jobs``: images pulled
    or built at once; ``artefact_jobs``: provider artefacts made at once; ``artefact_source``: make
    them from the registry or the store (``daemon``; ``auto``: the store when it answers). ``build``:
    SWE-bench images not present are built from ``repo_mirror`` (bare repositories), not pulled."""
    store_available = await store_answers()
    found = image_jobs(plan, artefact_source=artefact_source, store_available=store_available, build=build)
    if any(j.kind is None for j in found) and not store_available:
        raise store_unavailable()
    # Phases in order of first appearance; two providers' kinds may share a phase, so each job is
    # cleaned and made by its own kind, never by the phase's first.
    kinds: dict[ArtefactKind, list[ImageJob]] = {}
    for j in found:
        if j.kind is not None:
            kinds.setdefault(j.kind, []).append(j)
    for kind, mine in kinds.items():
        kind.clean_stale(mine)
    await asyncio.gather(*(estimate(j, store_available) for j in found))
    if build:  # before the disk check: what cannot be built takes no room
        await asyncio.to_thread(_refuse_unbuildable, found, repo_mirror or Path(), dry_run)
    report = PrepareReport(found)
    report.disk = await check_disk(
        found,
        store_available=store_available,
        budget=disk_budget,
        jobs_in_parallel=max(jobs, artefact_jobs),
        refuse=not dry_run,
    )
    if dry_run:
        return report
    options = MakeOptions(attempts=retries, backoff=backoff, timeout=timeout)
    stored = [j for j in found if j.kind is None]
    await _run_phase("images", stored, jobs, lambda j: _store_job(j, options, repo_mirror), progress)
    failed_refs = {j.ref: j for j in stored if j.status == "failed"}
    for j in found:
        if j.kind is not None and not j.from_registry and j.ref in failed_refs:
            j.status, j.error = "skipped", f"its image failed: {failed_refs[j.ref].error[-200:]}"
    phases = {j.phase: j.kind.title for j in found if j.kind is not None}
    for phase, title in phases.items():
        mine = [j for j in found if j.phase == phase]
        await _run_phase(title, mine, artefact_jobs, lambda j: _make_artefact(j, options), progress)
    return report


__all__ = [
    "ImageJob",
    "PrepareReport",
    "image_jobs",
    "prepare_images_async",
]
