"""The local image store: where task images are built, pulled, kept and read (the docker daemon's).

Every provider's artefacts start here: docker runs these images, apptainer converts them to SIFs
(sandbox/sif.py). A benchmark's environment build (images/) and ``anyswe prepare images`` reach
the store through these functions only, so no module outside ``sandbox/`` runs a runtime's CLI.
Builds are serialised per tag within a process and across processes (a file lock), and an image
that exists is never built again: its tag is the hash of what it is built from.
"""

from __future__ import annotations

import asyncio
import fcntl
import ipaddress
import json
import shutil
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from anyswe import _proc
from anyswe._threads import in_thread
from anyswe.config import cache_dir
from anyswe.errors import ImageBuildError, ImageNotFound, RuntimeNotAvailable, SandboxError

if TYPE_CHECKING:
    from python_on_whales import DockerClient

# In-process build locks, one set per event loop: an asyncio.Lock belongs to the loop it first
# waited in, and `run_sync` may run successive experiments on new loops in one process (Jupyter).
_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Lock]] = weakref.WeakKeyDictionary()
# A task image is a few Dockerfile steps on a local base: half an hour means a hung build.
BUILD_TIMEOUT = 1800.0
#: Registry answers that no retry changes.
PERMANENT = ("manifest unknown", "not found", "unauthorized", "denied", "invalid reference", "does not exist")


def _docker() -> DockerClient:
    from python_on_whales import DockerClient

    return DockerClient()


def _cli() -> list[str]:
    return list(_docker().client_config.docker_cmd)


@asynccontextmanager
async def build_lock(key: str) -> AsyncIterator[None]:
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


async def store_answers() -> bool:
    """Whether the store's daemon is installed and answers."""
    if shutil.which("docker") is None:
        return False
    r = await _proc.run([*_cli(), "info", "--format", "{{.ServerVersion}}"], timeout=30)
    return r.exit_code == 0 and not r.timed_out


def store_unavailable() -> RuntimeNotAvailable:
    """The error for a preparation that needs the store when its daemon does not answer."""
    return RuntimeNotAvailable(
        "these images need the local image store (docker: a docker provider, or SIFs made from its images), "
        "and docker does not answer: run scripts/provision.sh docker, or make the artefacts from the registry "
        "(--sif-source registry with a `sif` template on the apptainer provider)"
    )


async def store_root() -> Path:
    """The directory the store keeps its images in (for the disk estimate)."""
    r = await _proc.run([*_cli(), "info", "--format", "{{.DockerRootDir}}"], timeout=60)
    return Path(r.stdout.decode().strip() or "/var/lib/docker")


async def image_id(image: str) -> str:
    """The id (config digest) of the local ``image``, or :class:`ImageNotFound`."""
    from python_on_whales.exceptions import DockerException, NoSuchImage

    try:
        return str((await asyncio.to_thread(_docker().image.inspect, image)).id)
    except DockerException as exc:
        # A daemon that does not answer is no missing image (ImageNotFound is permanent, never retried).
        missing = isinstance(exc, NoSuchImage)
        raise (ImageNotFound if missing else SandboxError)(
            f"image {image!r} not found locally" if missing else f"could not inspect image {image!r}",
            argv=exc.docker_command,
            exit_code=exc.return_code,
            stderr=exc.stderr,
        ) from None


async def image_present(image: str) -> bool:
    """Whether ``image`` is in the store."""
    r = await _proc.run([*_cli(), "image", "inspect", "--format", "{{.Id}}", image], timeout=60)
    return r.exit_code == 0 and not r.timed_out


async def image_size(image: str) -> int | None:
    """Unpacked bytes of the local ``image`` (None: not in the store)."""
    r = await _proc.run([*_cli(), "image", "inspect", "--format", "{{.Size}}", image], timeout=60)
    return int(r.stdout.decode().strip()) if r.exit_code == 0 and r.stdout.strip() else None


async def remove_image(image: str) -> None:
    """Remove ``image`` from the store (a build that did not check out)."""
    await _proc.run([*_cli(), "image", "rm", "--force", image], timeout=120)


async def build_image(dockerfile: Path, tag: str, *, log: Path | None = None, timeout: float = BUILD_TIMEOUT) -> str:
    """Build ``dockerfile`` (its directory is the context) as ``tag`` unless ``tag`` exists.

    With ``log``, the build's whole output (each step's) is written there, and a failure's error ends
    with the failing step's output rather than only the one-line summary (``--quiet`` drops it).
    """
    docker = _docker()
    async with build_lock(tag.replace("/", "_").replace(":", "_")):
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
            raise ImageBuildError(f"image build of {tag} failed ({how}):\n{output}")
    return tag


async def pull_image(ref: str, *, attempts: int = 3, backoff: float = 5.0) -> None:
    """Pull ``ref`` into the store, retrying transient registry failures with exponential backoff."""
    for attempt in range(1, attempts + 1):
        r = await _proc.run([*_cli(), "pull", "--quiet", ref], timeout=3600)
        if r.exit_code == 0 and not r.timed_out:
            return
        err = (r.stderr.decode("utf-8", "replace").strip() or f"exit {r.exit_code}")[-500:]
        if r.timed_out:
            err = "timed out after 3600 s"
        if any(p in err.lower() for p in PERMANENT) or attempt == attempts:
            raise ImageBuildError(f"pull of {ref} failed after {attempt} attempt(s): {err}")
        await asyncio.sleep(backoff * 2 ** (attempt - 1))


async def save_image(image: str, archive: Path) -> None:
    """Save a local image into ``archive`` (what a SIF is built from without a registry)."""
    from python_on_whales.exceptions import DockerException

    try:
        await in_thread(_docker().image.save, image, output=archive)
    except DockerException as exc:
        raise ImageBuildError(f"saving image {image} failed: {exc.stderr or exc}") from None


async def run_in_image(image: str, script: str, *, timeout: float = 300) -> _proc.ProcResult:
    """Run a bash ``script`` in a throw-away, unnetworked container of ``image`` (reading what it holds)."""
    argv = [*_cli(), "run", "--rm", "--network", "none", "--entrypoint", "/bin/bash", image, "-c", script]
    return await _proc.run(argv, timeout=timeout)


async def manifest(ref: str) -> dict[str, Any]:
    """``ref``'s linux/amd64 image manifest as the store's CLI reads it from the default registry
    (a reference that names no registry host); :class:`LookupError` when it cannot tell."""
    r = await _proc.run([*_cli(), "manifest", "inspect", "--verbose", ref], timeout=120)
    if r.exit_code != 0 or r.timed_out:
        raise LookupError(r.stderr.decode("utf-8", "replace").strip()[-300:] or f"exit {r.exit_code}")
    found = json.loads(r.stdout)
    entries = found if isinstance(found, list) else [found]
    for entry in entries:
        platform = (entry.get("Descriptor") or {}).get("platform") or {}
        if not platform or (platform.get("os"), platform.get("architecture")) == ("linux", "amd64"):
            return dict(entry.get("SchemaV2Manifest") or entry.get("OCIManifest") or {})
    raise LookupError("no linux/amd64 image in the manifest list")


async def build_network_address() -> str:
    """The host's address on the network a build step's container has (the daemon's default bridge)."""
    r = await _proc.run(
        [*_cli(), "network", "inspect", "bridge", "--format", "{{range .IPAM.Config}}{{.Gateway}} {{.Subnet}}{{end}}"],
        timeout=60,
    )
    words = r.stdout.decode().split()
    if r.exit_code != 0 or not words:
        raise ImageBuildError(
            "the image store's default bridge network has no address: the repository is cloned in the build "
            f"over it ({r.stderr.decode(errors='replace').strip()[-300:]})"
        )
    for word in words:
        if "/" not in word:
            return word
    # Older engines leave Gateway out: the bridge takes the subnet's first address.
    return str(next(ipaddress.ip_network(words[0]).hosts()))
