"""The sandbox interface shared by every provider.

A provider (``provider.py``) starts sandboxes from a :class:`SandboxRequest`; a sandbox runs
commands, moves files and stops. Every command and single-file operation goes through the same
static helper inside the sandbox (``helper/anyswe-exec.c``), so both runtimes give the same working
directory, user switch, timeout, exit codes and file errors; a provider contributes only the argv
that enters its sandbox, how an env reaches it, and start/stop. Large argument lists travel in a
file, environment values in 0600 files, never on a command line.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import tempfile
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from anyswe import _proc
from anyswe.errors import SandboxError, SandboxExecError, SandboxLost, SandboxStartError
from anyswe.sandbox import files
from anyswe.sandbox.helper import HELPER_PATH
from anyswe.sandbox.labels import scratch_prefix
from anyswe.sandbox.reap import runtime_failure
from anyswe.sandbox.request import (
    GATEWAY_DIR,
    ExecResult,
    Gateway,
    Mount,
    NetworkPolicy,
    ProviderConfig,
    SandboxRequest,
    neutral,
)
from anyswe.sandbox.slots import Slot

if TYPE_CHECKING:
    from anyswe.sandbox.provider import SandboxProvider

__all__ = ["ExecResult", "Mount", "NetworkPolicy", "ProviderConfig", "Sandbox", "SandboxRequest", "neutral"]

# Grace given to the in-sandbox timeout before the host kills the runtime client as a backstop.
_BACKSTOP_SECONDS = 15.0
# Argument lists longer than this go through a file: runtimes cap their own command lines
# (apptainer refuses about 1 MiB) well below the kernel's ARG_MAX.
_INLINE_ARGV_BYTES = 64 * 1024


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


def _normalised(code: int) -> int:
    """A runtime client killed by signal N reports -N to Python; a shell (and docker) says 128+N."""
    return 128 - code if code < 0 else code


P = TypeVar("P", bound="SandboxProvider[Any]")


class Sandbox(ABC, Generic[P]):
    """One running container: exec, files in and out, stop. Use it as an async context manager."""

    #: Options a runtime needs the helper to take on every command (apptainer: scrub its own env).
    helper_flags: tuple[str, ...] = ()

    def __init__(
        self, request: SandboxRequest, provider: P, slot: Slot, *, network: NetworkPolicy, workdir: str = "/"
    ) -> None:
        self.request = request
        self.provider = provider
        self.network = network
        #: Exactly what this sandbox was started from, as its provider saw it at the start (docker: the
        #: image id the container runs, whatever its tag points at now); None when it cannot tell.
        self.image_identity: Hashable | None = None
        #: Where commands run when no workdir is given: the image's WORKDIR on every runtime.
        self.default_workdir = workdir or "/"
        self._slot = slot
        self._stopped = False
        self._scratch = Path(tempfile.mkdtemp(prefix=scratch_prefix()))
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

    @property
    def gateway_address(self) -> str | None:
        """``127.0.0.1:<port>``: where a ``gateway`` sandbox reaches its one host service (else None)."""
        gateway = self.request.gateway
        return None if gateway is None else f"127.0.0.1:{gateway.port}"

    async def open_gateway(self, gateway: Gateway) -> None:
        """Start the helper's relay from 127.0.0.1:port inside to the host's socket (at sandbox start)."""
        inside = f"{GATEWAY_DIR}/{PurePosixPath(gateway.socket).name}"
        r = await self._run([HELPER_PATH, "--forward", str(gateway.port), inside], timeout=60)
        if r.exit_code != 0:
            raise SandboxStartError.from_proc(f"could not open the gateway relay in sandbox {self.name}", r)

    # -- provider-specific ------------------------------------------------------------------------

    @abstractmethod
    def _exec_argv(self, inner: list[str], *, env_file: Path | None, stdin: bool) -> list[str]:
        """The host argv that runs ``inner`` (a helper invocation) inside this sandbox."""

    async def _env_transport(self, env: Mapping[str, str]) -> tuple[Path | None, list[str]]:
        """How ``env`` reaches the command: a host env file for the runtime, or helper options.

        The default is a 0600 host file in the runtime's ``--env-file`` format (``KEY=value``, taken
        literally): secrets never appear on a command line.
        """
        fd, path = tempfile.mkstemp(prefix="env-", dir=self._scratch)
        with os.fdopen(fd, "w") as fh:
            fh.write("".join(f"{k}={v}\n" for k, v in env.items()))
        return Path(path), []

    async def _env_in_sandbox(self, env: Mapping[str, str]) -> list[str]:
        """Helper options that load ``env`` from a 0600 file written into the sandbox (deleted once read)."""
        path = f"/tmp/.anyswe-env-{uuid.uuid4().hex}"
        await self.write_file(path, b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items()), mode=0o600)
        return ["-e", path]

    def _is_runtime_failure(self, result: _proc.ProcResult) -> bool:
        """True when the runtime, not the command, failed (e.g. the container is gone)."""
        return False

    @abstractmethod
    async def _teardown(self) -> None:
        """Remove the container/instance and its storage; must be idempotent."""

    # -- exec -------------------------------------------------------------------------------------

    def _workdir(self, workdir: str | None) -> str:
        # A relative workdir is taken from the default working directory, as files are (`_path`) and
        # as Inspect's sandbox contract resolves a relative cwd: the same on both runtimes, since the
        # helper gets the absolute path. A NUL cannot cross into an argv.
        if workdir is None:
            return self.default_workdir
        if "\0" in workdir:
            raise ValueError(f"workdir must not contain a NUL byte: {workdir!r}")
        return self._path(workdir)

    async def _helper_options(
        self,
        argv: list[str],
        *,
        timeout: float | None,
        env: Mapping[str, str] | None,
        workdir: str | None,
        user: str | None,
    ) -> tuple[list[str], Path | None]:
        """The helper invocation for one command, and the host env file to delete after it."""
        check_env(env or {})
        cwd = self._workdir(workdir)
        env_file, options = await self._env_transport(env) if env else (None, [])
        if sum(len(a.encode()) + 1 for a in argv) > _INLINE_ARGV_BYTES:
            path = f"/tmp/.anyswe-args-{uuid.uuid4().hex}"
            await self.write_file(path, b"".join(a.encode() + b"\0" for a in argv), mode=0o600)
            options, argv = [*options, "-a", path], []
        options = [*self.helper_flags, *options, "-C", cwd]
        if user:
            options += ["-u", user]
        if timeout is not None:
            options += ["-t", f"{timeout:g}"]
        return [HELPER_PATH, *options, "--", *argv], env_file

    async def _run(
        self,
        inner: list[str],
        *,
        env_file: Path | None = None,
        stdin: bytes | None = None,
        timeout: float | None = None,
        on_output: _proc.OnOutput | None = None,
        max_output: int = _proc.MAX_OUTPUT_BYTES,
    ) -> _proc.ProcResult:
        """Run one helper invocation; a failing runtime raises :class:`SandboxExecError`."""
        if self._stopped:
            raise SandboxExecError(f"sandbox {self.name} is stopped")
        host_argv = self._exec_argv(inner, env_file=env_file, stdin=stdin is not None)
        backstop = None if timeout is None else timeout + _BACKSTOP_SECONDS
        try:
            result = await _proc.run_streaming(
                host_argv, on_output=on_output, stdin=stdin, timeout=backstop, max_output=max_output
            )
        finally:
            if env_file is not None:
                env_file.unlink(missing_ok=True)
        # The helper exits 124 when it stopped the command at its timeout.
        timed_out = result.timed_out or (timeout is not None and result.exit_code == 124 and result.duration >= timeout)
        if not timed_out and self._is_runtime_failure(result):
            raise await runtime_failure(self, result)  # the runtime's, or the task's fork bomb
        return dataclasses.replace(result, exit_code=_normalised(result.exit_code), timed_out=timed_out)

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
        max_output: int = _proc.MAX_OUTPUT_BYTES,
    ) -> _proc.ProcResult:
        """Like :meth:`exec` with raw bytes output (for binary transfer)."""
        env = {**self.request.env, **(env or {})}
        inner, env_file = await self._helper_options(
            shell_argv(cmd), timeout=timeout, env=env, workdir=workdir, user=user
        )
        return await self._run(
            inner, env_file=env_file, stdin=stdin, timeout=timeout, on_output=on_output, max_output=max_output
        )

    async def exec(
        self,
        cmd: str | Sequence[str],
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        workdir: str | None = None,
        user: str | None = None,
        stdin: bytes | None = None,
        max_output: int = _proc.MAX_OUTPUT_BYTES,
    ) -> ExecResult:
        """Run a command (argv, or a shell string run by ``bash -lc``) inside the sandbox.

        A non-zero exit is a result, not an error, the same on every runtime: 127 not found, 126
        not executable (or an unusable ``workdir``/``user``: stderr says which), 128+N killed by
        signal N. :class:`SandboxExecError` means the runtime itself failed. ``timed_out`` is set
        when ``timeout`` seconds passed and the command's process group was killed. ``workdir``
        defaults to the image's WORKDIR, and a relative one is taken from there. Of each stream at most
        ``max_output`` bytes are kept (head and tail, a marker line between; ``stdout_dropped`` counts the rest).
        """
        r = await self.exec_bytes(
            cmd, timeout=timeout, env=env, workdir=workdir, user=user, stdin=stdin, max_output=max_output
        )
        return ExecResult.from_proc(r)

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
        max_output: int = _proc.MAX_OUTPUT_BYTES,
    ) -> ExecResult:
        """:meth:`exec` for long runs: output goes to ``log_path`` and ``on_output(stream, text)`` as it comes.

        The log file gets both streams as they arrive (flushed per chunk, so a crash keeps what came),
        up to ``max_output`` bytes of each, then a marker: it is on the host's disk. ``on_output`` sees all.
        """
        log = open(log_path, "ab") if log_path is not None else None  # noqa: SIM115 - closed below
        decoders = {s: _incremental_decoder() for s in ("stdout", "stderr")}
        logged = {"stdout": 0, "stderr": 0}

        def deliver(stream: str, chunk: bytes) -> None:
            if log is not None and logged[stream] <= max_output:
                room = max_output - logged[stream]
                log.write(chunk[:room] if len(chunk) <= room else chunk[:room] + _proc.cut_marker(stream, None))
                logged[stream] += len(chunk)
                log.flush()
            if on_output is not None:
                on_output(stream, decoders[stream].decode(chunk))

        try:
            r = await self.exec_bytes(
                cmd, timeout=timeout, env=env, workdir=workdir, user=user, on_output=deliver, max_output=max_output
            )
        finally:
            if log is not None:
                log.close()
        return ExecResult.from_proc(r)

    # -- files ------------------------------------------------------------------------------------

    def _path(self, path: str) -> str:
        """A sandbox path; a relative one is taken from the default working directory."""
        return str(PurePosixPath(self.default_workdir) / path)

    async def _checked(
        self, cmd: list[str], *, stdin: bytes | None = None, sink: Callable[[bytes], object] | None = None, what: str
    ) -> None:
        """Run ``cmd``; its failure raises. ``sink``: where its stdout (data of any size) goes as it comes."""
        inner, _ = await self._helper_options(cmd, timeout=None, env=None, workdir="/", user=None)
        if (r := await self._run(inner, stdin=stdin, on_output=files.stdout_to(sink))).exit_code != 0:
            raise SandboxError.from_proc(f"{what} failed in sandbox {self.name}", dataclasses.replace(r, argv=cmd))

    async def write_file(self, path: str, data: bytes, *, mode: int = 0o644, user: str | None = None) -> None:
        """Write ``data`` to ``path`` (parents created), as root or ``user``. A directory there, a missing or
        unwritable location raise the matching :class:`~anyswe.errors.SandboxFileError`, never an infra error."""
        target = self._path(path)
        r = await self._run([HELPER_PATH, *(["-u", user] if user else []), "--write", target, f"{mode:o}"], stdin=data)
        files.raise_for_file_status(r, target, self.name)

    async def read_file(self, path: str, *, user: str | None = None, max_output: int | None = None) -> bytes:
        """The bytes of ``path``, whatever its size (streamed, not held to the output cap); a missing
        file, a directory, no permission or more than ``max_output`` bytes raise a SandboxFileError."""
        target, chunks = self._path(path), list[bytes]()
        argv = [HELPER_PATH, *(["-u", user] if user else []), "--read", target]
        r = await self._run(argv, on_output=files.stdout_to(chunks.append))
        files.raise_for_file_status(r, target, self.name)
        return files.joined(chunks, max_output, target)

    async def copy_in(self, src: str | os.PathLike[str], dest: str) -> None:
        """Copy a host file or directory to ``dest`` in the sandbox (binary-safe, modes kept)."""
        dest_path = PurePosixPath(self._path(dest))
        tar = files.tar_of_path(Path(src), dest_path.name)
        await self._checked(
            files.untar_argv(dest_path.parent, keep_owner=False), stdin=tar, what=f"copying {src} to {dest}"
        )

    async def copy_out(self, src: str, dest: str | os.PathLike[str]) -> None:
        """Copy a file or directory ``src`` from the sandbox to the host path ``dest``, whatever its size
        (its tar stream goes to a file beside ``dest``, never whole into memory)."""
        p, dest = PurePosixPath(self._path(src)), Path(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=dest.parent) as tar:
            argv = ["tar", "-c", "-C", str(p.parent), "-f", "-", p.name]
            await self._checked(argv, sink=tar.write, what=f"copying {src} out")
            tar.seek(0)
            files.extract_tar(tar, p.name, dest)

    # -- lifecycle --------------------------------------------------------------------------------

    async def check_alive(self, during: str, *, settle: float = 0.0) -> None:
        """Raise :class:`SandboxLost` naming the cause if the sandbox died (``during`` says in what);
        a :class:`~anyswe.errors.SandboxOverLimit` (the agent's failure) if one of its own limits ended
        it (its memory, its disk).

        ``settle``: seconds to keep looking; a runtime reports a kill a moment after the commands
        inside have died (docker still says "running" just after ``docker kill``).
        """
        deadline = time.monotonic() + settle
        while (reason := await self.provider.gone_reason(self.name)) is None and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        if reason is not None:  # ended by its own limit: the task's doing, not a lost sandbox
            lost = SandboxLost if (own := await self.provider.over_limit(self.name)) is None else type(own)
            raise lost(f"sandbox {self.name} died during {during}: {own or reason}")

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
