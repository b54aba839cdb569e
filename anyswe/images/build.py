"""Build task images locally and convert docker images to SIFs, cached by content hash.

A docker image is tagged with the hash of its build context, so an unchanged task is never built
twice; a SIF is named after the docker image *id* it came from, so it is rebuilt exactly when the
image changed. Docker is reached through python-on-whales; ``apptainer build`` is an argv.
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
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from anyswe import _proc
from anyswe._threads import in_thread
from anyswe.config import cache_dir
from anyswe.errors import ImageBuildError, ImageNotFound, SandboxError

if TYPE_CHECKING:
    from python_on_whales import DockerClient

    from anyswe.sandbox.provider import Provenance

# In-process build locks, one set per event loop: an asyncio.Lock belongs to the loop it first
# waited in, and `run_sync` may run successive experiments on new loops in one process (Jupyter).
_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Lock]] = weakref.WeakKeyDictionary()
# SIF builds are CPU- and disk-bound (mksquashfs): running several at once only slows each down.
_SIF_BUILDS = threading.BoundedSemaphore(int(os.environ.get("ANYSWE_SIF_BUILDS", "1")))
# A task image is a few Dockerfile steps on a local base: half an hour means a hung build.
BUILD_TIMEOUT = 1800.0
# gzip at level 1 builds about 40% faster than the default for a SIF about 10% larger.
_MKSQUASHFS_ARGS = os.environ.get("ANYSWE_MKSQUASHFS_ARGS", "-comp gzip -Xcompression-level 1")


def _docker() -> DockerClient:
    from python_on_whales import DockerClient

    return DockerClient()


@asynccontextmanager
async def _build_lock(key: str) -> AsyncIterator[None]:
    """Serialise builds of one artefact within this process and across processes."""
    lock = _locks.setdefault(asyncio.get_running_loop(), {}).setdefault(key, asyncio.Lock())
    async with lock:
        lock_path = cache_dir() / "locks" / f"{key}.lock"
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(lock_path, "w")  # noqa: SIM115 - held across awaits
        try:
            await in_thread(fcntl.flock, fh, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
            fh.close()


async def image_id(image: str) -> str:
    """The docker image id of ``image``, or :class:`ImageNotFound`."""
    from python_on_whales.exceptions import DockerException, NoSuchImage

    try:
        return str((await asyncio.to_thread(_docker().image.inspect, image)).id)
    except DockerException as exc:
        # A daemon that does not answer is no missing image (ImageNotFound is permanent, never retried).
        missing = isinstance(exc, NoSuchImage)
        raise (ImageNotFound if missing else SandboxError)(
            f"docker image {image!r} not found locally" if missing else f"docker could not inspect image {image!r}",
            argv=exc.docker_command,
            exit_code=exc.return_code,
            stderr=exc.stderr,
        ) from None


async def build_docker_image(
    dockerfile: Path, tag: str, *, log: Path | None = None, timeout: float = BUILD_TIMEOUT
) -> str:
    """``docker build`` ``dockerfile`` (its directory is the context) as ``tag`` unless ``tag`` exists.

    With ``log``, the build's whole output (each step's) is written there, and a failure's error ends
    with the failing step's output rather than only docker's one-line summary (``--quiet`` drops it).
    """
    docker = _docker()
    async with _build_lock(tag.replace("/", "_").replace(":", "_")):
        if await asyncio.to_thread(docker.image.exists, tag):
            return tag
        # The classic builder (BuildKit is not always installed beside Debian's docker.io), with
        # --force-rm: it keeps the container of a failed step otherwise (python-on-whales' legacy_build
        # cannot ask for that), and one leaks per failed build.
        argv = [*docker.client_config.docker_cmd, "build", "--force-rm", "--file", str(dockerfile)]
        if log is None:
            argv.append("--quiet")
        r = await _proc.run([*argv, "--tag", tag, str(dockerfile.parent)], timeout=timeout)
        if log is not None:
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_bytes(r.stdout + b"\n--- stderr ---\n" + r.stderr)
        if r.exit_code != 0 or r.timed_out:
            output = r.stderr.decode("utf-8", "replace")[-3000:] + r.stdout.decode("utf-8", "replace")[-3000:]
            how = f"timed out after {timeout:.0f}s" if r.timed_out else f"exit {r.exit_code}"
            raise ImageBuildError(f"docker build of {tag} failed ({how}):\n{output}")
    return tag


def _release_if_taken(acquired: asyncio.Future[bool]) -> None:
    if not acquired.cancelled() and acquired.exception() is None:
        _SIF_BUILDS.release()


def sif_build_argv(apptainer: str) -> list[str]:
    """``apptainer build`` with anyswe's squashfs settings; the output path and source URI follow."""
    argv = [apptainer, "build", "--force"]
    if _MKSQUASHFS_ARGS:
        argv.append(f"--mksquashfs-args={_MKSQUASHFS_ARGS}")
    return argv


async def save_image(image: str, archive: Path) -> None:
    """``docker save`` of a local image into ``archive`` (what a SIF is built from without a registry)."""
    from python_on_whales.exceptions import DockerException

    try:
        await in_thread(_docker().image.save, image, output=archive)
    except DockerException as exc:
        raise ImageBuildError(f"docker save {image} failed: {exc.stderr or exc}") from None


async def _apptainer_build(apptainer: str, sif: Path, archive: Path, timeout: float) -> None:
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


_BUILD_PREFIX = "build-"


def collect_interrupted_builds() -> list[str]:
    """Remove what SIF builds killed part-way left (a docker archive of the image: hundreds of MB).

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
    """``<sif>.json``: where a SIF's provenance is kept (its sha256, the docker image it came from)."""
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


async def ensure_sif(image: str, *, apptainer: str = "apptainer", timeout: float = 1800) -> Path:
    """A SIF built from the local docker ``image``, reused while the image id is unchanged."""
    full_id = await image_id(image)
    digest = full_id.split(":")[-1]
    sif_dir = cache_dir() / "sif"
    sif_dir.mkdir(parents=True, exist_ok=True)
    sif = sif_dir / f"{digest[:24]}.sif"
    if sif.is_file():
        return sif
    async with _build_lock(f"sif-{digest[:24]}"):
        if sif.is_file():
            return sif
        with tempfile.TemporaryDirectory(dir=sif_dir, prefix=f"{_BUILD_PREFIX}{digest[:24]}-") as tmp:
            archive = Path(tmp) / "image.tar"
            await save_image(image, archive)
            part = Path(tmp) / "image.sif"
            await _apptainer_build(apptainer, part, archive, timeout)
            os.replace(part, sif)  # atomic: a reader never sees half a SIF
            await in_thread(write_sidecar, sif, source=image, source_digest=full_id, built_from="daemon")
    return sif
