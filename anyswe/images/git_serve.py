"""A bare git repository served read-only over ``git://`` on the image store's build network, for a while.

A ``docker build`` step (the classic builder, no ``RUN --mount``) can clone from it as swebench's
builds clone from GitHub, so no copy of the repository is added to any layer of the image. The
repository is copied first (a mirror may be read-only, or lack its empty ``refs/``), and the daemon
(and its per-connection children, one process group) is stopped when the block ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import stat
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

from anyswe.config import cache_dir
from anyswe.errors import ImageBuildError
from anyswe.sandbox.store import build_network_address


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _writable_copy(mirror: Path, dest: Path) -> None:
    shutil.copytree(mirror, dest, symlinks=True)
    for path in [dest, *dest.rglob("*")]:
        if not path.is_symlink():
            path.chmod(path.stat().st_mode | stat.S_IWUSR)
    # A mirror made without its empty directories (a read-only copy, an archive) is not a git
    # repository to git until it has refs/ again.
    for sub in ("refs/heads", "refs/tags"):
        (dest / sub).mkdir(parents=True, exist_ok=True)


@contextlib.asynccontextmanager
async def serve_mirror(mirror: Path) -> AsyncIterator[str]:
    """A copy of the bare repository ``mirror`` served read-only by ``git daemon`` on the build network;
    yields its ``git://`` URL (in place of swebench's GitHub URL), stops the daemon afterwards."""
    async with serve_mirrors([mirror]) as (url,):
        yield url


@contextlib.asynccontextmanager
async def serve_mirrors(mirrors: Sequence[Path]) -> AsyncIterator[tuple[str, ...]]:
    """:func:`serve_mirror` of several repositories (a repository and its submodules') by one daemon;
    yields their URLs in order. Their directory names must differ."""
    names = [m.name for m in mirrors]
    if len(set(names)) != len(names):
        raise ImageBuildError(f"mirrors served together need distinct names: {names}")
    host = await build_network_address()
    root = cache_dir() / "swebench-build"
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root, prefix="mirror-") as tmp:
        for mirror in mirrors:
            await asyncio.to_thread(_writable_copy, mirror, Path(tmp) / mirror.name)
        port = _free_port(host)
        log = open(Path(tmp) / "daemon.log", "wb")  # noqa: SIM115 - held while the daemon runs
        proc = await asyncio.create_subprocess_exec(
            "git",
            "daemon",
            "--export-all",
            "--reuseaddr",
            "--informative-errors",
            f"--base-path={tmp}",
            f"--listen={host}",
            f"--port={port}",
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,  # its per-connection children go with it
        )
        try:
            await _wait_listening(host, port, proc)
            yield tuple(f"git://{host}:{port}/{name}" for name in names)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(proc.wait(), 10)
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()
            log.close()


async def _wait_listening(host: str, port: int, proc: asyncio.subprocess.Process) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if proc.returncode is not None:
            raise ImageBuildError(f"git daemon exited ({proc.returncode}) before listening on {host}:{port}")
        try:
            _, writer = await asyncio.open_connection(host, port)
        except OSError:
            await asyncio.sleep(0.1)
            continue
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return
    raise ImageBuildError(f"git daemon did not listen on {host}:{port} within 15 s")


__all__ = ["serve_mirror", "serve_mirrors"]
