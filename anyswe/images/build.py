"""Build task images locally and convert docker images to SIFs, cached by content hash.

A docker image is tagged with the hash of its build context, so an unchanged task is never built
twice; a SIF is named after the docker image *id* it came from, so it is rebuilt exactly when the
image changed.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import tempfile
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from anyswe import _proc
from anyswe.config import cache_dir
from anyswe.errors import ImageBuildError, ImageNotFound

_locks: dict[str, asyncio.Lock] = {}
# SIF builds are CPU- and disk-bound (mksquashfs): running several at once only slows each down.
_SIF_BUILDS = threading.BoundedSemaphore(int(os.environ.get("ANYSWE_SIF_BUILDS", "1")))
# gzip at level 1 builds about 40% faster than the default for a SIF about 10% larger.
_MKSQUASHFS_ARGS = os.environ.get("ANYSWE_MKSQUASHFS_ARGS", "-comp gzip -Xcompression-level 1")


@asynccontextmanager
async def _build_lock(key: str) -> AsyncIterator[None]:
    """Serialise builds of one artefact within this process and across processes."""
    lock = _locks.setdefault(key, asyncio.Lock())
    async with lock:
        lock_path = cache_dir() / "locks" / f"{key}.lock"
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(lock_path, "w")  # noqa: SIM115 - held across awaits
        try:
            await asyncio.to_thread(fcntl.flock, fh, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
            fh.close()


async def image_id(image: str) -> str:
    """The docker image id of ``image``, or :class:`ImageNotFound`."""
    r = await _proc.run(["docker", "image", "inspect", "--format", "{{.Id}}", image], timeout=60)
    if r.exit_code != 0:
        raise ImageNotFound(
            f"docker image {image!r} not found locally", argv=r.argv, exit_code=r.exit_code, stderr=r.stderr
        )
    return r.stdout.decode().strip()


async def build_docker_image(dockerfile: Path, tag: str, *, timeout: float = 1800) -> str:
    """``docker build`` ``dockerfile`` (its directory is the context) as ``tag`` unless ``tag`` exists."""
    async with _build_lock(tag.replace("/", "_").replace(":", "_")):
        exists = await _proc.run(["docker", "image", "inspect", tag], timeout=60)
        if exists.exit_code == 0:
            return tag
        r = await _proc.run(
            ["docker", "build", "--pull=false", "-q", "-f", str(dockerfile), "-t", tag, str(dockerfile.parent)],
            timeout=timeout,
            env=os.environ | {"DOCKER_BUILDKIT": "0"},
        )
        if r.exit_code != 0 or r.timed_out:
            raise ImageBuildError(
                f"docker build of {tag} failed (exit {r.exit_code}):\n"
                + r.stderr.decode(errors="replace")[-3000:]
                + r.stdout.decode(errors="replace")[-3000:]
            )
    return tag


async def ensure_sif(image: str, *, apptainer: str = "apptainer", timeout: float = 1800) -> Path:
    """A SIF built from the local docker ``image``, reused while the image id is unchanged."""
    digest = (await image_id(image)).split(":")[-1]
    sif_dir = cache_dir() / "sif"
    sif_dir.mkdir(parents=True, exist_ok=True)
    sif = sif_dir / f"{digest[:24]}.sif"
    if sif.is_file():
        return sif
    async with _build_lock(f"sif-{digest[:24]}"):
        if sif.is_file():
            return sif
        with tempfile.TemporaryDirectory(dir=sif_dir, prefix="build-") as tmp:
            archive = Path(tmp) / "image.tar"
            r = await _proc.run(["docker", "save", "-o", str(archive), image], timeout=timeout)
            if r.exit_code != 0:
                raise ImageBuildError(f"docker save {image} failed: {r.stderr.decode(errors='replace')}")
            part = Path(tmp) / "image.sif"
            argv = [apptainer, "build", "--force"]
            if _MKSQUASHFS_ARGS:
                argv.append(f"--mksquashfs-args={_MKSQUASHFS_ARGS}")
            await asyncio.to_thread(_SIF_BUILDS.acquire)
            try:
                r = await _proc.run([*argv, str(part), f"docker-archive://{archive}"], timeout=timeout)
            finally:
                _SIF_BUILDS.release()
            if r.exit_code != 0 or r.timed_out:
                raise ImageBuildError(
                    f"apptainer build from {image} failed (exit {r.exit_code}):\n"
                    + r.stderr.decode(errors="replace")[-3000:]
                )
            os.replace(part, sif)  # atomic: a reader never sees half a SIF
    return sif
