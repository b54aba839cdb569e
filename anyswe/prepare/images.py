"""``anyswe prepare images``: every image a spec's plan needs, made ready before the run.

Two phases. *docker*: each instance image is pulled (or built: by its dataset, or with ``build`` as swebench
builds it), skipping those present, in parallel up to a bound, retrying transient registry failures. *sif*: for
an apptainer provider with a ``sif`` template, one SIF per instance is built into that path, from
the registry (``docker://``, no docker needed: the HPC path) or from the local daemon (a docker
archive); without a template the SIF goes to anyswe's own cache, as a run would make it.

A SIF is built under a temporary name, checked (``apptainer sif list``), hashed, and renamed: a
build killed part-way never counts as built, and the next ``prepare`` builds it again. Before any
work, the disk needed is estimated per filesystem (sizes from the registry manifest or the daemon;
a SIF as a measured fraction of the unpacked image) and the whole preparation is refused when a
filesystem lacks the room. One image failing is reported and does not stop the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from anyswe import _proc
from anyswe._threads import in_thread
from anyswe.config import base_image
from anyswe.datasets import format_image, image_builder, image_fields
from anyswe.errors import AnysweError, ImageBuildError, RuntimeNotAvailable
from anyswe.images.swebench_build import build_instance_image
from anyswe.prepare.disk import check_disk, estimate
from anyswe.prepare.registry import Reference, remote_image

if TYPE_CHECKING:
    from anyswe.datasets.instance import Instance
    from anyswe.plan import Plan

#: Registry answers that no retry changes.
_PERMANENT = ("manifest unknown", "not found", "unauthorized", "denied", "invalid reference", "does not exist")
# Builds at once share apptainer's layer cache: one reading a blob the other is still writing fails
# with this, whatever follows ("unexpected end of JSON input", "... not found in layout").
_CACHE_RACE = "conveyor failed to get"

SifSource = Literal["auto", "registry", "daemon"]
Status = Literal["pending", "present", "pulled", "built", "failed", "skipped"]


@dataclass
class ImageJob:
    """One artefact to make: a docker image (pulled or built) or a SIF."""

    phase: Literal["image", "sif"]
    ref: str  #: the docker reference
    target: str  #: the docker reference, or the SIF's path ("" when it goes to anyswe's cache)
    instance_id: str
    providers: set[str] = field(default_factory=set)
    build_dataset: str | None = None  #: docker phase: built locally by this dataset
    #: the row a SWE-bench image is built from (``--build``; its SIF: never asked of a registry)
    build_instance: Instance | None = None
    from_registry: bool = False  #: sif phase: docker:// rather than the local daemon
    needs: int = 0  #: bytes kept when done
    transient: int = 0  #: bytes needed only while it is made
    size_known: bool = True
    status: Status = "pending"
    seconds: float = 0.0
    error: str = ""
    #: What the estimate had to assume (a size neither the daemon nor the registry could tell).
    note: str = ""

    def row(self) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "image": self.target or f"{self.ref} (SIF cache)",
            "providers": ",".join(sorted(self.providers)),
            "status": self.status,
            "est_mb": round((self.needs + self.transient) / 2**20),
            "seconds": round(self.seconds, 1),
            "error": (self.error or self.note)[-300:],
        }


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

    def __str__(self) -> str:
        return ", ".join(f"{n} {s}" for s, n in sorted(self.counts().items())) or "nothing to prepare"


# -- what the plan needs ---------------------------------------------------------------------------


def image_jobs(
    plan: Plan, *, sif_source: SifSource = "auto", docker_available: bool = True, build: bool = False
) -> list[ImageJob]:
    """The artefacts ``plan`` needs, one per docker reference and one per SIF path, in plan order
    (``build``: template-named images are built, not pulled, and their SIFs made from the daemon)."""
    from anyswe.images.resolve import ImageSource

    docker_jobs: dict[str, ImageJob] = {}
    sif_jobs: dict[str, ImageJob] = {}
    from_registry = not build and (sif_source == "registry" or (sif_source == "auto" and not docker_available))
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
            needs = cfg.prepared_artefacts(image_fields(inst), sif_from_registry=from_registry)
            if needs.docker_image:
                job = docker_jobs.setdefault(
                    ref, ImageJob("image", ref, ref, inst.instance_id, build_dataset=source.build_dataset)
                )
                job.build_instance = inst if built_here else None
                job.providers.add(name)
            if needs.sif is not None:
                key = needs.sif or f"cache:{ref}"
                sif = sif_jobs.setdefault(
                    key,
                    ImageJob("sif", ref, needs.sif, inst.instance_id, from_registry=bool(needs.sif) and from_registry),
                )
                sif.build_instance = inst if built_here else None
                sif.providers.add(name)
    return [*docker_jobs.values(), *sif_jobs.values()]


# -- making one artefact ---------------------------------------------------------------------------


async def _pull(job: ImageJob, attempts: int, backoff: float) -> None:
    for attempt in range(1, attempts + 1):
        r = await _proc.run(["docker", "pull", "--quiet", job.ref], timeout=3600)
        if r.exit_code == 0 and not r.timed_out:
            job.status = "pulled"
            return
        err = (r.stderr.decode("utf-8", "replace").strip() or f"exit {r.exit_code}")[-500:]
        if r.timed_out:
            err = "timed out after 3600 s"
        if any(p in err.lower() for p in _PERMANENT) or attempt == attempts:
            raise ImageBuildError(f"docker pull {job.ref} failed after {attempt} attempt(s): {err}")
        await asyncio.sleep(backoff * 2 ** (attempt - 1))


async def _build(job: ImageJob) -> None:
    from anyswe.images.build import build_docker_image

    assert job.build_dataset is not None
    dockerfile, tag = image_builder(job.build_dataset)(job.instance_id, base_image())
    await build_docker_image(dockerfile, tag)
    job.status = "built"


def remove_stale_parts(directory: Path) -> list[str]:
    """Half-built SIFs (``*.part-<pid>``) and their docker archives (``*.work-<pid>``) of processes no
    longer alive: a killed prepare left them."""
    removed = []
    found = [*directory.glob("*.part-*"), *directory.glob("*.work-*")] if directory.is_dir() else []
    for part in found:
        pid = part.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            with contextlib.suppress(OSError):
                if part.is_dir():
                    shutil.rmtree(part)
                else:
                    part.unlink()
                removed.append(str(part))
    return removed


async def _sif(job: ImageJob, apptainer: str, timeout: float, attempts: int = 1, backoff: float = 0.0) -> None:
    from anyswe.images.build import ensure_sif, image_id, save_image, sif_build_argv, write_sidecar

    if not job.target:  # anyswe's own cache, keyed by the docker image id (as a run makes it)
        await ensure_sif(job.ref, apptainer=apptainer, timeout=timeout)
        job.status = "built"
        return
    target = Path(job.target)
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(f"{target.name}.part-{os.getpid()}")
    work = target.with_name(f"{target.name}.work-{os.getpid()}")
    argv = sif_build_argv(apptainer)
    try:
        if job.from_registry:
            ref = Reference.parse(job.ref)
            if ref.insecure:
                argv.append("--no-https")
            source_digest = None
            with contextlib.suppress(LookupError):
                source_digest = (await remote_image(job.ref, docker_cli=False)).config_digest
            for attempt in range(1, attempts + 1):
                r = await _proc.run([*argv, str(part), f"docker://{job.ref}"], timeout=timeout)
                err = r.stderr.decode("utf-8", "replace").lower()
                permanent = any(p in err for p in _PERMANENT) and _CACHE_RACE not in err
                if r.exit_code == 0 or r.timed_out or attempt == attempts or permanent:
                    break
                # A transient failure (the layer-cache race above, a registry hiccup): tried again as a pull is.
                await asyncio.sleep(backoff * 2 ** (attempt - 1))
        else:
            source_digest = await image_id(job.ref)
            work.mkdir(parents=True, exist_ok=True)
            archive = work / "image.tar"
            await save_image(job.ref, archive)
            r = await _proc.run([*argv, str(part), f"docker-archive://{archive}"], timeout=timeout)
        if r.exit_code != 0 or r.timed_out:
            how = f"timed out after {timeout:.0f} s" if r.timed_out else f"exit {r.exit_code}"
            raise ImageBuildError(
                f"apptainer build of {target.name} from {job.ref} failed ({how}): "
                + r.stderr.decode("utf-8", "replace").strip()[-800:]
            )
        check = await _proc.run([apptainer, "sif", "list", str(part)], timeout=120)
        if check.exit_code != 0 or b"Squashfs" not in check.stdout + check.stderr:
            raise ImageBuildError(f"the SIF built from {job.ref} does not check out: {check.stderr.decode()[-300:]}")
        os.replace(part, target)  # only a checked SIF gets its final name
        built_from = "registry" if job.from_registry else "daemon"
        await in_thread(write_sidecar, target, source=job.ref, source_digest=source_digest, built_from=built_from)
        job.status = "built"
    finally:
        part.unlink(missing_ok=True)
        shutil.rmtree(work, ignore_errors=True)


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


async def _docker_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    r = await _proc.run(["docker", "info", "--format", "{{.ServerVersion}}"], timeout=30)
    return r.exit_code == 0 and not r.timed_out


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
    sif_jobs: int = 2,
    sif_source: SifSource = "auto",
    disk_budget: int | None = None,
    retries: int = 3,
    backoff: float = 5.0,
    apptainer: str = "apptainer",
    timeout: float = 3600,
    progress: bool = True,
    dry_run: bool = False,
    build: bool = False,
    repo_mirror: Path | None = None,
) -> PrepareReport:
    """Pull, build and convert what ``plan`` needs; see the module docstring. ``build``: SWE-bench
    images not present are built from ``repo_mirror`` (bare repositories) instead of pulled."""
    docker_available = await _docker_answers()
    found = image_jobs(plan, sif_source=sif_source, docker_available=docker_available, build=build)
    if any(j.phase == "image" for j in found) and not docker_available:
        raise RuntimeNotAvailable(
            "these images need docker (a docker provider, or SIFs from the local daemon), and docker does not "
            "answer: run scripts/provision.sh docker, or build SIFs from the registry (--sif-source registry "
            "with a `sif` template on the apptainer provider)"
        )
    for directory in {Path(j.target).parent for j in found if j.phase == "sif" and j.target}:
        remove_stale_parts(directory)
    await asyncio.gather(*(estimate(j, docker_available) for j in found))
    report = PrepareReport(found)
    report.disk = await check_disk(
        found, docker_available=docker_available, budget=disk_budget, jobs_in_parallel=max(jobs, sif_jobs)
    )
    if dry_run:
        return report

    async def docker_job(job: ImageJob) -> None:
        if job.build_dataset is not None:
            await _build(job)
        elif job.build_instance is not None:
            chain = await build_instance_image(job.build_instance, repo_mirror or Path())
            job.status, job.note = "built", chain.summary
        else:
            await _pull(job, retries, backoff)

    await _run_phase("docker images", [j for j in found if j.phase == "image"], jobs, docker_job, progress)
    failed_refs = {j.ref: j for j in found if j.phase == "image" and j.status == "failed"}
    for j in found:
        if j.phase == "sif" and not j.from_registry and j.ref in failed_refs:
            j.status, j.error = "skipped", f"its docker image failed: {failed_refs[j.ref].error[-200:]}"

    async def sif_job(job: ImageJob) -> None:
        await _sif(job, apptainer, timeout, retries, backoff)

    await _run_phase("SIFs", [j for j in found if j.phase == "sif"], sif_jobs, sif_job, progress)
    return report


__all__ = [
    "ImageJob",
    "PrepareReport",
    "image_jobs",
    "prepare_images_async",
    "remove_stale_parts",
]
