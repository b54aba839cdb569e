"""File transfer into and out of a sandbox: tar streams for trees, typed errors for single files.

One mechanism for every runtime: binary-safe, modes kept, no runtime-specific copy command.
"""

from __future__ import annotations

import errno
import io
import os
import tarfile
import tempfile
from pathlib import Path, PurePosixPath
from typing import IO, TYPE_CHECKING

from anyswe.errors import (
    SandboxError,
    SandboxFileError,
    SandboxFileNotFoundError,
    SandboxIsADirectoryError,
    SandboxNotADirectoryError,
    SandboxPermissionError,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from anyswe._proc import OnOutput, ProcResult


def tar_of_path(src: Path, arcname: str) -> bytes:
    """A tar stream of a host file or directory, stored as ``arcname``."""
    if not src.exists():
        raise FileNotFoundError(src)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(src, arcname=arcname)
    return buf.getvalue()


def extract_tar(data: bytes | IO[bytes], member: str, dest: Path) -> None:
    """Extract the tar stream's ``member`` (file or directory) to ``dest``, atomically; the stream as
    bytes or as a file open for reading.

    ``dest`` an existing directory and ``member`` a file: the file lands inside it.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    stream = io.BytesIO(data) if isinstance(data, bytes) else data
    with tarfile.open(fileobj=stream, mode="r") as tar, tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        tar.extractall(tmp, filter="data")
        extracted = Path(tmp) / member
        if dest.is_dir() and not extracted.is_dir():
            dest = dest / member
        os.replace(extracted, dest)


def untar_argv(dest_dir: PurePosixPath, *, keep_owner: bool = True) -> list[str]:
    """The in-sandbox argv that unpacks a tar stream from stdin into ``dest_dir`` (created)."""
    flags = "" if keep_owner else " --no-same-owner"
    return ["sh", "-c", f'mkdir -p "$1" && tar -x{flags} -C "$1" -f -', "sh", str(dest_dir)]


def raise_for_file_status(result: ProcResult, path: str, sandbox: str) -> None:
    """Turn the helper's file-mode exit status (an errno) into the matching typed error."""
    if result.exit_code == 0:
        return
    message = result.stderr.decode("utf-8", errors="replace").strip().rpartition(": ")[2] or "failed"
    error = _FILE_ERRORS.get(result.exit_code)
    if error is not None:
        raise error(message, path)
    raise SandboxError.from_proc(f"file operation on {path} failed in sandbox {sandbox}", result)


def stdout_to(sink: Callable[[bytes], object] | None) -> OnOutput | None:
    """An output callback that hands a command's stdout (data of any size: a file, a tar stream),
    chunk by chunk, to ``sink``: nothing of it is held to the output cap."""

    def deliver(stream: str, chunk: bytes) -> None:
        if stream == "stdout" and sink is not None:
            sink(chunk)

    return None if sink is None else deliver


def joined(chunks: list[bytes], limit: int | None, path: str) -> bytes:
    """A file read back in ``chunks``, unless it is over ``limit`` bytes (None: no limit)."""
    if limit is not None and (size := sum(map(len, chunks))) > limit:
        raise SandboxFileError(f"too large to read back ({size} bytes, over the {limit}-byte limit)", path)
    return b"".join(chunks)


_FILE_ERRORS: dict[int, type[SandboxFileError]] = {
    errno.ENOENT: SandboxFileNotFoundError,
    errno.EPERM: SandboxPermissionError,
    errno.EACCES: SandboxPermissionError,
    errno.EROFS: SandboxPermissionError,
    errno.ENOTDIR: SandboxNotADirectoryError,
    errno.EISDIR: SandboxIsADirectoryError,
}
