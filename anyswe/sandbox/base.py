"""The sandbox interface shared by every provider.

A provider (``provider.py``) starts sandboxes from a :class:`SandboxRequest`; a sandbox runs
commands, moves files and stops. Both providers implement the same small surface so that an experiment's verdicts cannot
depend on which runtime ran it. Provider-specific work is the start/stop, the argv of one exec and
turning a docker reference into what the runtime runs; everything else (timeouts, env transport,
file transfer as tar streams, concurrency slots, teardown) lives here once.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from anyswe import _proc
from anyswe.errors import SandboxError, SandboxExecError
from anyswe.sandbox import files
from anyswe.sandbox.request import ExecResult, Mount, NetworkPolicy, ProviderConfig, SandboxRequest, neutral
from anyswe.sandbox.slots import Slot

if TYPE_CHECKING:
    from anyswe.sandbox.provider import SandboxProvider

__all__ = ["ExecResult", "Mount", "NetworkPolicy", "ProviderConfig", "Sandbox", "SandboxRequest", "neutral"]

# Grace given to an in-sandbox `timeout` before the host kills the runtime client as a backstop.
_BACKSTOP_SECONDS = 15.0


def shell_argv(cmd: str | Sequence[str]) -> list[str]:
    """A shell string runs under ``bash -lc``; an argv runs as it is."""
    if isinstance(cmd, str):
        return ["bash", "-lc", cmd]
    argv = [str(a) for a in cmd]
    if not argv:
        raise ValueError("empty command")
    return argv


def check_env(env: Mapping[str, str]) -> None:
    for key, value in env.items():
        if not key or "=" in key or not key.replace("_", "a").isalnum():
            raise ValueError(f"invalid environment variable name: {key!r}")
        if "\n" in value or "\0" in value:
            raise ValueError(f"environment variable {key} has a newline or NUL in its value")


P = TypeVar("P", bound="SandboxProvider[Any]")


class Sandbox(ABC, Generic[P]):
    """One running container: exec, files in and out, stop. Use it as an async context manager."""

    def __init__(self, request: SandboxRequest, provider: P, slot: Slot, *, network: NetworkPolicy) -> None:
        self.request = request
        self.provider = provider
        self.network = network
        self._slot = slot
        self._stopped = False
        self._scratch = Path(tempfile.mkdtemp(prefix="anyswe-sbx-"))
        os.chmod(self._scratch, 0o700)

    @property
    def name(self) -> str:
        return self.request.name

    @property
    def image(self) -> str:
        return self.request.image

    @property
    def host_address(self) -> str | None:
        """The address at which this sandbox reaches a service listening on the host, or None (no network)."""
        return self.provider.host_address(self.network)

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

    def _is_runtime_failure(self, result: _proc.ProcResult) -> bool:
        """True when the runtime, not the command, failed (e.g. the container is gone)."""
        return False

    @abstractmethod
    async def _teardown(self) -> None:
        """Remove the container/instance and its storage; must be idempotent."""

    # -- exec -------------------------------------------------------------------------------------

    def _write_env_file(self, env: Mapping[str, str]) -> Path:
        # Secrets travel in a 0600 file that only root can read, never on a command line.
        check_env(env)
        fd, path = tempfile.mkstemp(prefix="env-", dir=self._scratch)
        with os.fdopen(fd, "w") as fh:
            fh.write("".join(f"{k}={v}\n" for k, v in env.items()))
        return Path(path)

    async def _host_argv(
        self,
        cmd: str | Sequence[str],
        *,
        timeout: float | None,
        env: Mapping[str, str] | None,
        workdir: str | None,
        user: str | None,
        stdin: bool,
    ) -> tuple[list[str], Path | None]:
        """The host argv for one exec, and the env file to delete after it."""
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
        return self._exec_argv(argv, env_file=env_file, workdir=workdir, user=user, stdin=stdin), env_file

    async def exec_bytes(
        self,
        cmd: str | Sequence[str],
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        workdir: str | None = None,
        user: str | None = None,
        stdin: bytes | None = None,
        on_output: _proc.OnOutput | None = None,
    ) -> _proc.ProcResult:
        """Like :meth:`exec` with raw bytes output (for binary transfer)."""
        env = {**self.request.env, **(env or {})}
        return await self._exec_raw(
            cmd, timeout=timeout, env=env, workdir=workdir, user=user, stdin=stdin, on_output=on_output
        )

    async def _exec_raw(
        self,
        cmd: str | Sequence[str],
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        workdir: str | None = None,
        user: str | None = None,
        stdin: bytes | None = None,
        on_output: _proc.OnOutput | None = None,
    ) -> _proc.ProcResult:
        """One exec with exactly ``env`` (anyswe's own plumbing: no request env)."""
        host_argv, env_file = await self._host_argv(
            cmd, timeout=timeout, env=env, workdir=workdir, user=user, stdin=stdin is not None
        )
        try:
            backstop = None if timeout is None else timeout + _BACKSTOP_SECONDS
            result = await _proc.run_streaming(host_argv, on_output=on_output, stdin=stdin, timeout=backstop)
        finally:
            if env_file is not None:
                env_file.unlink(missing_ok=True)
        timed_out = result.timed_out or (
            timeout is not None and result.exit_code in (124, 137) and result.duration >= timeout
        )
        if not timed_out and self._is_runtime_failure(result):
            raise SandboxExecError.from_proc(
                f"{self.provider.name} could not run a command in sandbox {self.name}", result
            )
        return dataclasses.replace(result, timed_out=timed_out)

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
        return _decoded(r)

    async def exec_stream(
        self,
        cmd: str | Sequence[str],
        *,
        log_path: str | os.PathLike[str] | None = None,
        on_output: Callable[[str, str], None] | None = None,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        workdir: str | None = None,
        user: str | None = None,
    ) -> ExecResult:
        """:meth:`exec` for long runs: output goes to ``log_path`` and ``on_output(stream, text)`` as it comes.

        The log file gets both streams as they arrive (flushed per chunk, so a crash keeps what came).
        """
        log = open(log_path, "ab") if log_path is not None else None  # noqa: SIM115 - closed below
        decoders = {s: _incremental_decoder() for s in ("stdout", "stderr")}

        def deliver(stream: str, chunk: bytes) -> None:
            if log is not None:
                log.write(chunk)
                log.flush()
            if on_output is not None:
                on_output(stream, decoders[stream].decode(chunk))

        try:
            r = await self.exec_bytes(cmd, timeout=timeout, env=env, workdir=workdir, user=user, on_output=deliver)
        finally:
            if log is not None:
                log.close()
        return _decoded(r)

    # -- files ------------------------------------------------------------------------------------

    async def _checked(self, cmd: Sequence[str], *, stdin: bytes | None = None, what: str) -> bytes:
        r = await self._exec_raw(cmd, stdin=stdin)
        if r.exit_code != 0:
            raise SandboxError.from_proc(
                f"{what} failed in sandbox {self.name}", dataclasses.replace(r, argv=list(cmd))
            )
        return r.stdout

    async def write_file(self, path: str, data: bytes, *, mode: int = 0o644) -> None:
        """Write ``data`` to ``path`` in the sandbox (parents created)."""
        p = PurePosixPath(path)
        tar = files.tar_of_file(p.name, data, mode)
        await self._checked(files.untar_argv(p.parent), stdin=tar, what=f"writing {path}")

    async def read_file(self, path: str) -> bytes:
        """The bytes of ``path`` in the sandbox."""
        return await self._checked(["cat", "--", path], what=f"reading {path}")

    async def copy_in(self, src: str | os.PathLike[str], dest: str) -> None:
        """Copy a host file or directory to ``dest`` in the sandbox (binary-safe, modes kept)."""
        dest_path = PurePosixPath(dest)
        tar = files.tar_of_path(Path(src), dest_path.name)
        await self._checked(
            files.untar_argv(dest_path.parent, keep_owner=False), stdin=tar, what=f"copying {src} to {dest}"
        )

    async def copy_out(self, src: str, dest: str | os.PathLike[str]) -> None:
        """Copy a file or directory ``src`` from the sandbox to the host path ``dest``."""
        p = PurePosixPath(src)
        data = await self._checked(["tar", "-c", "-C", str(p.parent), "-f", "-", p.name], what=f"copying {src} out")
        files.extract_tar(data, p.name, Path(dest))

    # -- lifecycle --------------------------------------------------------------------------------

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
            self._slot.release()

    async def __aenter__(self) -> Sandbox[P]:
        return self

    async def __aexit__(self, *exc: object) -> None:
        # Teardown must finish even when the surrounding task is being cancelled.
        await asyncio.shield(self.stop())


def _incremental_decoder() -> Any:
    import codecs

    return codecs.getincrementaldecoder("utf-8")(errors="replace")


def _decoded(r: _proc.ProcResult) -> ExecResult:
    return ExecResult(
        exit_code=r.exit_code,
        stdout=r.stdout.decode("utf-8", errors="replace"),
        stderr=r.stderr.decode("utf-8", errors="replace"),
        duration=r.duration,
        timed_out=r.timed_out,
    )
