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
from typing import TYPE_CHECKING

from anyswe.errors import (
    SandboxError,
    SandboxFileError,
    SandboxFileNotFoundError,
    SandboxIsADirectoryError,
    SandboxNotADirectoryError,
    SandboxPermissionError,
)

if TYPE_CHECKING:
    from anyswe._proc import ProcResult


def tar_of_path(src: Path, arcname: str) -> bytes:
    """A tar stream of a host file or directory, stored as ``arcname``."""
    if not src.exists():
        raise FileNotFoundError(src)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(src, arcname=arcname)
    return buf.getvalue()


def extract_tar(data: bytes, member: str, dest: Path) -> None:
    """Extract the tar stream's ``member`` (file or directory) to ``dest``, atomically.

    ``dest`` an existing directory and ``member`` a file: the file lands inside it.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar, tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
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
    if result.stdout_dropped:
        # A file cut to the output cap is corrupt data: refused, never handed back.
        raise SandboxFileError(f"too large to read back ({result.stdout_dropped} bytes over the output cap)", path)
    if result.exit_code == 0:
        return
    message = result.stderr.decode("utf-8", errors="replace").strip().rpartition(": ")[2] or "failed"
    error = _FILE_ERRORS.get(result.exit_code)
    if error is not None:
        raise error(message, path)
    raise SandboxError.from_proc(f"file operation on {path} failed in sandbox {sandbox}", result)


_FILE_ERRORS: dict[int, type[SandboxFileError]] = {
    errno.ENOENT: SandboxFileNotFoundError,
    errno.EPERM: SandboxPermissionError,
    errno.EACCES: SandboxPermissionError,
    errno.EROFS: SandboxPermissionError,
    errno.ENOTDIR: SandboxNotADirectoryError,
    errno.EISDIR: SandboxIsADirectoryError,
}
