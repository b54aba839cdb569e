"""The sandbox interface shared by every provider.

A provider starts sandboxes from an image; a sandbox runs commands, moves files and stops. Both
providers implement the same small surface so that an experiment's verdicts cannot depend on which
runtime ran it. Provider-specific work is the start/stop and the argv of one exec; everything else
(timeouts, env files, file transfer as tar streams, concurrency slots, teardown) lives here once.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import io
import os
import socket
import tarfile
import tempfile
import uuid
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from anyswe import _proc
from anyswe.errors import SandboxError, SandboxExecError

#: Every container and instance anyswe starts is named with this prefix; ``anyswe gc`` relies on it.
NAME_PREFIX = "anyswe-"
LABEL_MANAGED = "anyswe.managed"
LABEL_RUN = "anyswe.run_id"
LABEL_TASK = "anyswe.task_id"
#: Groups every sandbox one process tree starts (``ANYSWE_SESSION``), so a test session can check its
#: own leaks while another session shares the runtime.
LABEL_SESSION = "anyswe.session"


#: ``<host>:<pid>`` of the process that started the sandbox: gc leaves alone what a live process owns.
LABEL_OWNER = "anyswe.owner"


def current_session() -> str:
    return os.environ.get("ANYSWE_SESSION", "")


def current_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def owner_alive(owner: str | None) -> bool:
    """Whether the process named by an owner label still runs on this host."""
    if not owner or ":" not in owner:
        return False
    host, _, pid = owner.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# Grace given to an in-sandbox `timeout` before the host kills the runtime client as a backstop.
_BACKSTOP_SECONDS = 15.0


@dataclass(frozen=True)
class ExecResult:
    """What one command in a sandbox did."""

    exit_code: int
    stdout: str
    stderr: str
    duration: float
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


class ProviderConfig(BaseModel):
    """Settings common to every provider."""

    model_config = ConfigDict(extra="forbid")

    concurrency: int = Field(default=4, ge=1, description="Sandboxes of this provider alive at once.")
    startup_timeout: float = Field(default=300.0, gt=0, description="Seconds allowed to start one sandbox.")


@dataclass
class SandboxRequest:
    """What to start: the image and the labels that tie the sandbox to a run and task."""

    image: str
    run_id: str = ""
    task_id: str = ""
    name: str = field(default_factory=lambda: f"{NAME_PREFIX}{uuid.uuid4().hex[:16]}")

    session: str = field(default_factory=current_session)
    owner: str = field(default_factory=current_owner)

    def labels(self) -> dict[str, str]:
        return {
            LABEL_MANAGED: "1",
            LABEL_RUN: self.run_id,
            LABEL_TASK: self.task_id,
            LABEL_SESSION: self.session,
            LABEL_OWNER: self.owner,
        }


def shell_argv(cmd: str | Sequence[str]) -> list[str]:
    """A shell string runs under ``bash -lc``; an argv runs as it is."""
    if isinstance(cmd, str):
        return ["bash", "-lc", cmd]
    argv = [str(a) for a in cmd]
    if not argv:
        raise ValueError("empty command")
    return argv


class Sandbox(ABC):
    """One running container: exec, files in and out, stop. Use it as an async context manager."""

    provider_name: ClassVar[str]

    def __init__(self, request: SandboxRequest, provider: SandboxProvider) -> None:
        self.request = request
        self.provider = provider
        self._stopped = False
        self._scratch = Path(tempfile.mkdtemp(prefix="anyswe-sbx-"))
        os.chmod(self._scratch, 0o700)

    @property
    def name(self) -> str:
        return self.request.name

    @property
    def image(self) -> str:
        return self.request.image

    # -- provider-specific ------------------------------------------------------------------------

    @abstractmethod
    def _exec_argv(
        self, argv: list[str], *, env_file: Path | None, workdir: str | None, user: str | None, stdin: bool
    ) -> list[str]:
        """The host argv that runs ``argv`` inside this sandbox."""

    def _as_user(self, argv: list[str], user: str) -> list[str]:
        """``argv`` run as ``user``; the default leaves it to the runtime's own flag (docker --user)."""
        return argv

    async def _env_transport(self, env: Mapping[str, str]) -> tuple[Path | None, list[str]]:
        """How ``env`` reaches the command: a host env file for the runtime, or an argv prefix.

        The default is a 0600 host file in the runtime's ``--env-file`` format (``KEY=value``, taken
        literally): secrets never appear on a command line.
        """
        return self._write_env_file(env), []

    @abstractmethod
    async def _teardown(self) -> None:
        """Remove the container/instance and its storage; must be idempotent."""

    # -- shared -----------------------------------------------------------------------------------

    @staticmethod
    def _check_env(env: Mapping[str, str]) -> None:
        for key, value in env.items():
            if not key or "=" in key or not key.replace("_", "a").isalnum():
                raise ValueError(f"invalid environment variable name: {key!r}")
            if "\n" in value or "\0" in value:
                raise ValueError(f"environment variable {key} has a newline or NUL in its value")

    def _write_env_file(self, env: Mapping[str, str]) -> Path:
        # Secrets travel in a 0600 file that only root can read, never on a command line.
        self._check_env(env)
        fd, path = tempfile.mkstemp(prefix="env-", dir=self._scratch)
        with os.fdopen(fd, "w") as fh:
            fh.write("".join(f"{k}={v}\n" for k, v in env.items()))
        return Path(path)

    async def exec_bytes(
        self,
        cmd: str | Sequence[str],
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        workdir: str | None = None,
        user: str | None = None,
        stdin: bytes | None = None,
    ) -> _proc.ProcResult:
        """Like :meth:`exec` with raw bytes output (for binary transfer)."""
        if self._stopped:
            raise SandboxExecError(f"sandbox {self.name} is stopped")
        argv = shell_argv(cmd)
        if user:
            argv = self._as_user(argv, user)
        env_file, prefix = await self._env_transport(env) if env else (None, [])
        argv = [*prefix, *argv]
        if timeout is not None:
            # The in-sandbox `timeout` kills the command's process group inside the container, which
            # the host cannot reach for docker; the host-side backstop covers a hung runtime client.
            argv = ["timeout", "-k", "5", f"{timeout:g}", *argv]
        try:
            host_argv = self._exec_argv(argv, env_file=env_file, workdir=workdir, user=user, stdin=stdin is not None)
            result = await _proc.run(
                host_argv,
                stdin=stdin,
                timeout=None if timeout is None else timeout + _BACKSTOP_SECONDS,
            )
        finally:
            if env_file is not None:
                env_file.unlink(missing_ok=True)
        timed_out = result.timed_out or (
            timeout is not None and result.exit_code in (124, 137) and result.duration >= timeout
        )
        if not timed_out and self._is_runtime_failure(result):
            raise SandboxExecError(
                f"{self.provider_name} could not run a command in sandbox {self.name}",
                argv=result.argv,
                exit_code=result.exit_code,
                stdout=result.stdout,
                stderr=result.stderr,
            )
        return dataclasses.replace(result, timed_out=timed_out)

    def _is_runtime_failure(self, result: _proc.ProcResult) -> bool:
        """True when the runtime, not the command, failed (e.g. the container is gone)."""
        return False

    async def exec(
        self,
        cmd: str | Sequence[str],
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        workdir: str | None = None,
        user: str | None = None,
        stdin: bytes | None = None,
    ) -> ExecResult:
        """Run a command (argv, or a shell string run by ``bash -lc``) inside the sandbox.

        A non-zero exit is a result, not an error; :class:`SandboxExecError` means the runtime itself
        failed. ``timed_out`` is set when ``timeout`` seconds passed and the command was killed.
        """
        r = await self.exec_bytes(cmd, timeout=timeout, env=env, workdir=workdir, user=user, stdin=stdin)
        return ExecResult(
            exit_code=r.exit_code,
            stdout=r.stdout.decode("utf-8", errors="replace"),
            stderr=r.stderr.decode("utf-8", errors="replace"),
            duration=r.duration,
            timed_out=r.timed_out,
        )

    async def _checked(self, cmd: Sequence[str], *, stdin: bytes | None = None, what: str) -> bytes:
        r = await self.exec_bytes(cmd, stdin=stdin)
        if r.exit_code != 0:
            raise SandboxError(
                f"{what} failed in sandbox {self.name}",
                argv=list(cmd),
                exit_code=r.exit_code,
                stdout=r.stdout,
                stderr=r.stderr,
            )
        return r.stdout

    async def write_file(self, path: str, data: bytes, *, mode: int = 0o644) -> None:
        """Write ``data`` to ``path`` in the sandbox (parents created)."""
        p = PurePosixPath(path)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo(p.name)
            info.size = len(data)
            info.mode = mode
            tar.addfile(info, io.BytesIO(data))
        await self._checked(
            ["sh", "-c", 'mkdir -p "$1" && tar -x -C "$1" -f -', "sh", str(p.parent)],
            stdin=buf.getvalue(),
            what=f"writing {path}",
        )

    async def read_file(self, path: str) -> bytes:
        """The bytes of ``path`` in the sandbox."""
        return await self._checked(["cat", "--", path], what=f"reading {path}")

    async def copy_in(self, src: str | os.PathLike[str], dest: str) -> None:
        """Copy a host file or directory to ``dest`` in the sandbox (binary-safe, modes kept)."""
        src_path = Path(src)
        if not src_path.exists():
            raise FileNotFoundError(src_path)
        dest_path = PurePosixPath(dest)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            tar.add(src_path, arcname=dest_path.name)
        await self._checked(
            ["sh", "-c", 'mkdir -p "$1" && tar -x --no-same-owner -C "$1" -f -', "sh", str(dest_path.parent)],
            stdin=buf.getvalue(),
            what=f"copying {src_path} to {dest}",
        )

    async def copy_out(self, src: str, dest: str | os.PathLike[str]) -> None:
        """Copy a file or directory ``src`` from the sandbox to the host path ``dest``."""
        p = PurePosixPath(src)
        data = await self._checked(["tar", "-c", "-C", str(p.parent), "-f", "-", p.name], what=f"copying {src} out")
        dest_path = Path(dest)
        dest_path.parent.mkdir(parents=True, exist_ok=True)
        with (
            tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar,
            tempfile.TemporaryDirectory(dir=dest_path.parent) as tmp,
        ):
            tar.extractall(tmp, filter="data")
            extracted = Path(tmp) / p.name
            if dest_path.is_dir() and not extracted.is_dir():
                dest_path = dest_path / p.name
            os.replace(extracted, dest_path)

    async def stop(self) -> None:
        """Remove the sandbox and everything it stored. Idempotent; safe after a failed start."""
        if self._stopped:
            return
        self._stopped = True
        try:
            await self._teardown()
        finally:
            with contextlib.suppress(OSError):
                for f in self._scratch.iterdir():
                    f.unlink()
                self._scratch.rmdir()
            self.provider._release()

    async def __aenter__(self) -> Sandbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        # Teardown must finish even when the surrounding task is being cancelled.
        await asyncio.shield(self.stop())


class SandboxProvider(ABC):
    """Starts sandboxes of one runtime, at most ``config.concurrency`` alive at once."""

    name: ClassVar[str]
    config: ProviderConfig

    def __init__(self, config: Any) -> None:
        self.config = config
        self._slots: asyncio.Semaphore | None = None
        self._slots_loop: asyncio.AbstractEventLoop | None = None

    def _semaphore(self) -> asyncio.Semaphore:
        # A semaphore belongs to one event loop; `run_sync` may run successive runs on new loops.
        loop = asyncio.get_running_loop()
        if self._slots is None or self._slots_loop is not loop:
            self._slots = asyncio.Semaphore(self.config.concurrency)
            self._slots_loop = loop
        return self._slots

    def _release(self) -> None:
        if self._slots is not None:
            self._slots.release()

    @abstractmethod
    async def _start(self, request: SandboxRequest) -> Sandbox:
        """Start the sandbox; on any failure remove what was half-started, then raise."""

    @abstractmethod
    async def check(self) -> None:
        """Raise :class:`RuntimeNotAvailable` unless the runtime answers."""

    @abstractmethod
    async def image_exists(self, image: str) -> bool:
        """Whether ``image`` is available locally."""

    @abstractmethod
    async def remove(self, name: str) -> None:
        """Remove the sandbox called ``name`` and its storage, whether or not it runs; idempotent."""

    @abstractmethod
    async def sandboxes(self) -> dict[str, dict[str, str] | None]:
        """Every anyswe sandbox of this runtime on this host: name -> its labels (None if unknown)."""

    async def leftovers(self, session: str | None = None) -> list[str]:
        """Names of every anyswe sandbox on this host (of one ``session`` if given)."""
        found = await self.sandboxes()
        if session is None:
            return sorted(found)
        return sorted(n for n, labels in found.items() if labels is not None and labels.get(LABEL_SESSION) == session)

    async def start(self, image: str, *, run_id: str = "", task_id: str = "") -> Sandbox:
        """Start a sandbox from ``image``, waiting for a free concurrency slot first."""
        request = SandboxRequest(image=image, run_id=run_id, task_id=task_id)
        await self._semaphore().acquire()
        try:
            return await asyncio.wait_for(self._start(request), self.config.startup_timeout)
        except BaseException:
            self._release()
            raise

    @contextlib.asynccontextmanager
    async def sandbox(self, image: str, *, run_id: str = "", task_id: str = "") -> AsyncIterator[Sandbox]:
        """``async with provider.sandbox(image) as sb:`` -- stopped on every path, cancellation included."""
        sb = await self.start(image, run_id=run_id, task_id=task_id)
        try:
            yield sb
        finally:
            await asyncio.shield(sb.stop())
