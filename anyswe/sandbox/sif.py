"""SIFs: apptainer's artefacts, converted from an image in the local store or pulled from a registry.

A SIF in anyswe's cache is named after the image *id* it came from, so it is rebuilt exactly when
the image changed. A SIF for a spec's ``sif`` template (``anyswe prepare images``) is built under a
temporary name, checked (``apptainer sif list``), hashed and renamed: a build killed part-way never
counts as built, and the next preparation builds it again. Each SIF's provenance (its sha256 and
the image id it came from) is kept in a ``<sif>.json`` sidecar.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from anyswe import _proc
from anyswe._threads import in_thread
from anyswe.config import cache_dir
from anyswe.errors import ImageBuildError
from anyswe.sandbox.artefacts import ArtefactKind, ImageJob, MakeOptions, Place
from anyswe.sandbox.store import PERMANENT, build_lock, image_id, save_image

if TYPE_CHECKING:
    from anyswe.sandbox.provider import Provenance

# SIF builds are CPU- and disk-bound (mksquashfs): running several at once only slows each down.
_SIF_BUILDS = threading.BoundedSemaphore(int(os.environ.get("ANYSWE_SIF_BUILDS", "1")))
# gzip at level 1 builds about 40% faster than the default for a SIF about 10% larger.
_MKSQUASHFS_ARGS = os.environ.get("ANYSWE_MKSQUASHFS_ARGS", "-comp gzip -Xcompression-level 1")
# Builds at once share apptainer's layer cache: one reading a blob the other is still writing fails
# with this, whatever follows ("unexpected end of JSON input", "... not found in layout").
_CACHE_RACE = "conveyor failed to get"
# Measured on this machine over anyswe's own images (docs/verified.md): a SIF (squashfs, gzip
# level 1) is about 0.45x the unpacked image.
SIF_FRACTION = 0.5
_BUILD_PREFIX = "build-"


def sif_build_argv(apptainer: str) -> list[str]:
    """``apptainer build`` with anyswe's squashfs settings; the output path and source URI follow."""
    argv = [apptainer, "build", "--force"]
    if _MKSQUASHFS_ARGS:
        argv.append(f"--mksquashfs-args={_MKSQUASHFS_ARGS}")
    return argv


def _release_if_taken(acquired: asyncio.Future[bool]) -> None:
    if not acquired.cancelled() and acquired.exception() is None:
        _SIF_BUILDS.release()


async def _build_from_archive(apptainer: str, sif: Path, archive: Path, timeout: float) -> None:
    argv = sif_build_argv(apptainer)
    acquiring = asyncio.ensure_future(in_thread(_SIF_BUILDS.acquire))
    try:
        await asyncio.shield(acquiring)
    except asyncio.CancelledError:
        # The thread goes on waiting and takes the slot later: give it back then, or it is lost for good.
        acquiring.add_done_callback(_release_if_taken)
        raise
    try:
        r = await _proc.run([*argv, str(sif), f"docker-archive://{archive}"], timeout=timeout)
    finally:
        _SIF_BUILDS.release()
    if r.exit_code != 0 or r.timed_out:
        raise ImageBuildError(
            f"apptainer build from {archive} failed (exit {r.exit_code}):\n" + r.stderr.decode(errors="replace")[-3000:]
        )


def collect_interrupted_builds() -> list[str]:
    """Remove what SIF builds killed part-way left (an archive of the image: hundreds of MB).

    A build works in ``sif/build-<digest>-*`` while it holds that digest's lock: a directory whose
    lock is free belongs to no live build.
    """
    sif_dir = cache_dir() / "sif"
    removed = []
    for path in sorted(sif_dir.glob(f"{_BUILD_PREFIX}*")) if sif_dir.is_dir() else []:
        digest = path.name.removeprefix(_BUILD_PREFIX).split("-")[0]
        lock_path = cache_dir() / "locks" / f"sif-{digest}.lock"
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        with open(lock_path, "w") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a build of this image runs now
            try:
                shutil.rmtree(path, ignore_errors=True)
                removed.append(str(path))
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)
    return removed


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(4 * 2**20):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def sidecar(sif: Path) -> Path:
    """``<sif>.json``: where a SIF's provenance is kept (its sha256, the image it came from)."""
    return sif.with_name(sif.name + ".json")


def write_sidecar(sif: Path, **fields: object) -> str:
    """Hash ``sif`` and record it with ``fields`` (source, source_digest, ...); returns the sha256."""
    digest = file_sha256(sif)
    stat = sif.stat()
    record = {**fields, "sha256": digest, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    tmp = sidecar(sif).with_name(sidecar(sif).name + f".{os.getpid()}")
    try:
        tmp.write_text(json.dumps(record, indent=1) + "\n")
        os.replace(tmp, sidecar(sif))
    except OSError:  # a read-only SIF directory: the hash is still returned, just not kept
        tmp.unlink(missing_ok=True)
    return digest


_provenance_memo: dict[tuple[str, int, int], tuple[str, str | None]] = {}


def sif_provenance(sif: Path) -> Provenance:
    """A SIF's sha256 and source image id: from its sidecar when it matches the file, else hashed (once)."""
    from anyswe.sandbox.provider import Provenance

    stat = sif.stat()
    key = (str(sif.resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _provenance_memo:
        record: dict[str, object] = {}
        with contextlib.suppress(OSError, ValueError):
            record = json.loads(sidecar(sif).read_text())
        if record.get("size") == stat.st_size and record.get("mtime_ns") == stat.st_mtime_ns and record.get("sha256"):
            _provenance_memo[key] = (str(record["sha256"]), _opt(record.get("source_digest")))
        else:
            _provenance_memo[key] = (file_sha256(sif), _opt(record.get("source_digest")))
    digest, source = _provenance_memo[key]
    return Provenance(digest, source)


def _opt(value: object) -> str | None:
    return str(value) if value else None


def cached_sif(full_id: str) -> Path:
    """Where :func:`ensure_sif` keeps the SIF of the image whose id is ``full_id`` (``sha256:...``)."""
    return cache_dir() / "sif" / f"{full_id.split(':')[-1][:24]}.sif"


async def ensure_sif(image: str, *, apptainer: str = "apptainer", timeout: float = 1800) -> Path:
    """A SIF built from the local ``image`` (in the store), reused while the image id is unchanged."""
    full_id = await image_id(image)
    digest = full_id.split(":")[-1]
    sif = cached_sif(full_id)
    sif_dir = sif.parent
    sif_dir.mkdir(parents=True, exist_ok=True)
    if sif.is_file():
        return sif
    async with build_lock(f"sif-{digest[:24]}"):
        if sif.is_file():
            return sif
        with tempfile.TemporaryDirectory(dir=sif_dir, prefix=f"{_BUILD_PREFIX}{digest[:24]}-") as tmp:
            archive = Path(tmp) / "image.tar"
            await save_image(image, archive)
            part = Path(tmp) / "image.sif"
            await _build_from_archive(apptainer, part, archive, timeout)
            os.replace(part, sif)  # atomic: a reader never sees half a SIF
            await in_thread(write_sidecar, sif, source=image, source_digest=full_id, built_from="daemon")
    return sif


def remove_stale_parts(directory: Path) -> list[str]:
    """Half-built SIFs (``*.part-<pid>``) and their image archives (``*.work-<pid>``) of processes no
    longer alive: a killed preparation left them."""
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


def sif_identity(path: str) -> tuple[str, str, int, int, int, int] | None:
    """A file's identity on disk (path, device, inode, size, mtime): what an instance was started from."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return ("sif", os.path.realpath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def sif_present(sif: Path) -> bool:
    """A SIF counts as built when it exists under its final name (only a checked build is renamed there)."""
    return sif.is_file() and sif.stat().st_size > 0


def _build_tmp() -> Path:
    return Path(os.environ.get("APPTAINER_TMPDIR") or os.environ.get("TMPDIR") or "/tmp")


async def _from_registry(argv: list[str], part: Path, ref: str, options: MakeOptions) -> _proc.ProcResult:
    from anyswe.prepare.registry import Reference

    if Reference.parse(ref).insecure:
        argv.append("--no-https")
    for attempt in range(1, options.attempts + 1):
        r = await _proc.run([*argv, str(part), f"docker://{ref}"], timeout=options.timeout)
        err = r.stderr.decode("utf-8", "replace").lower()
        permanent = any(p in err for p in PERMANENT) and _CACHE_RACE not in err
        if r.exit_code == 0 or r.timed_out or attempt == options.attempts or permanent:
            break
        # A transient failure (the layer-cache race above, a registry hiccup): tried again as a pull is.
        await asyncio.sleep(options.backoff * 2 ** (attempt - 1))
    return r


class SifArtefacts(ArtefactKind):
    """An apptainer provider's SIFs: into a ``sif`` template's paths, or anyswe's own cache."""

    phase: ClassVar[str] = "sif"
    title: ClassVar[str] = "SIFs"
    cache_name: ClassVar[str] = "SIF cache"

    def __init__(self, apptainer: str = "apptainer") -> None:
        self.apptainer = apptainer

    def clean_stale(self, jobs: list[ImageJob]) -> list[str]:
        return [p for d in {Path(j.target).parent for j in jobs if j.target} for p in remove_stale_parts(d)]

    def present(self, job: ImageJob) -> bool:
        return bool(job.target) and sif_present(Path(job.target))

    def estimate(self, job: ImageJob, unpacked: int, compressed: int | None) -> None:
        # A SIF build unpacks the image in a temporary directory (and, from the store, saves an archive).
        job.needs = int(unpacked * SIF_FRACTION)
        job.transient = unpacked + (compressed if job.from_registry and compressed else unpacked)

    def places(self, job: ImageJob) -> list[Place]:
        home = Path(job.target).parent if job.target else cache_dir() / "sif"
        return [Place(home, "SIFs", job.needs, 0), Place(_build_tmp(), "SIF build space", 0, job.transient)]

    async def make(self, job: ImageJob, options: MakeOptions) -> None:
        from anyswe.prepare.registry import remote_image

        if not job.target:  # anyswe's own cache, keyed by the image id (as a run makes it)
            await ensure_sif(job.ref, apptainer=self.apptainer, timeout=options.timeout)
            job.status = "built"
            return
        target = Path(job.target)
        target.parent.mkdir(parents=True, exist_ok=True)
        part = target.with_name(f"{target.name}.part-{os.getpid()}")
        work = target.with_name(f"{target.name}.work-{os.getpid()}")
        argv = sif_build_argv(self.apptainer)
        try:
            if job.from_registry:
                source_digest = None
                with contextlib.suppress(LookupError):
                    source_digest = (await remote_image(job.ref, store_cli=False)).config_digest
                r = await _from_registry(argv, part, job.ref, options)
            else:
                source_digest = await image_id(job.ref)
                work.mkdir(parents=True, exist_ok=True)
                archive = work / "image.tar"
                await save_image(job.ref, archive)
                r = await _proc.run([*argv, str(part), f"docker-archive://{archive}"], timeout=options.timeout)
            if r.exit_code != 0 or r.timed_out:
                how = f"timed out after {options.timeout:.0f} s" if r.timed_out else f"exit {r.exit_code}"
                raise ImageBuildError(
                    f"apptainer build of {target.name} from {job.ref} failed ({how}): "
                    + r.stderr.decode("utf-8", "replace").strip()[-800:]
                )
            check = await _proc.run([self.apptainer, "sif", "list", str(part)], timeout=120)
            if check.exit_code != 0 or b"Squashfs" not in check.stdout + check.stderr:
                raise ImageBuildError(
                    f"the SIF built from {job.ref} does not check out: {check.stderr.decode()[-300:]}"
                )
            os.replace(part, target)  # only a checked SIF gets its final name
            built_from = "registry" if job.from_registry else "daemon"
            await in_thread(write_sidecar, target, source=job.ref, source_digest=source_digest, built_from=built_from)
            job.status = "built"
        finally:
            part.unlink(missing_ok=True)
            shutil.rmtree(work, ignore_errors=True)
