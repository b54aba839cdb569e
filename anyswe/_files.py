"""Names and files that come from outside the host's trust: dataset ids and what a sandbox wrote.

An instance id becomes a directory name (``tasks/<key>``) and file names (scripts, predictions), so
it must be one plain path component. A file in a task's state directory was written by the agent
inside its sandbox: the host reads it only through :func:`read_task_file`, which never follows a
link, reads only a regular file, and caps what it reads.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import os
import re
import stat
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

#: What a name (an instance id) may hold: one path component, portable, never hidden.
NAME_CHARS = re.compile(r"[A-Za-z0-9._-]+")
MAX_NAME = 200  # a task key adds 18 characters; file systems allow 255
#: The most the host copies of one file a sandbox wrote.
READ_LIMIT = 16 * 1024 * 1024


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a path component (None when it can)."""
    if not name:
        return "is empty"
    if len(name) > MAX_NAME:
        return f"is {len(name)} characters long (at most {MAX_NAME})"
    if not NAME_CHARS.fullmatch(name):
        bad = sorted({c for c in name if not NAME_CHARS.fullmatch(c)})
        return f"may hold only letters, digits, '.', '_' and '-', not {''.join(bad)!r}"
    if name.startswith("."):
        return "may not start with '.'"
    return None


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # a FIFO must not block the open


class Refused(Exception):
    """A task file the host will not touch, and why."""


def _parts(rel: str | PurePosixPath) -> list[str]:
    parts = PurePosixPath(rel).parts
    if not parts or PurePosixPath(rel).is_absolute() or any(p in (".", "..") for p in parts):
        raise ValueError(f"not a relative path inside the directory: {rel!r}")
    return list(parts)


@contextlib.contextmanager
def _parent_fd(root: Path, parts: list[str]) -> Iterator[int]:
    """A descriptor of the directory holding ``parts[-1]``, each step opened without following links."""
    fd = os.open(root, _DIR_FLAGS)
    try:
        for part in parts[:-1]:
            try:
                step = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise Refused(f"{part} is not a directory (a link or a file)") from None
                raise
            os.close(fd)
            fd = step
        yield fd
    finally:
        os.close(fd)


def read_task_file(
    root: Path, rel: str, *, limit: int = READ_LIMIT, tail: bool = False, errors: str = "replace"
) -> str | None:
    """The text of ``root/rel``, a file a sandbox could write; None when it does not exist.

    Never through a symbolic link (at any step), only a regular file, at most ``limit`` bytes (the
    first, or the last with ``tail``), the truncation noted in the text. A file that is refused
    gives a one-line note saying why instead of its content. ``errors``: how bytes that are not
    UTF-8 are decoded (``surrogateescape`` keeps them, for a reader that names where they are).
    """
    parts = _parts(rel)
    try:
        with _parent_fd(root, parts) as dfd:
            try:
                fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=dfd)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise Refused("it is a symbolic link") from None
                raise
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                os.close(fd)
                raise Refused(f"it is not a regular file (mode {stat.filemode(st.st_mode)})")
            with os.fdopen(fd, "rb") as fh:
                if tail and st.st_size > limit:
                    fh.seek(st.st_size - limit)
                data = fh.read(limit + 1)
    except FileNotFoundError:
        return None
    except Refused as exc:
        return f"[anyswe: {rel} not copied: {exc}]\n"
    except OSError as exc:
        return f"[anyswe: {rel} not copied: {exc.strerror or exc}]\n"
    text = data[:limit].decode(errors=errors)
    if tail and st.st_size > limit:
        return f"[anyswe: {rel}: only the last {limit} of {st.st_size} bytes]\n{text}"
    if len(data) > limit:
        return f"{text}\n[anyswe: {rel}: truncated at {limit} bytes]\n"
    return text


def remove_task_file(root: Path, rel: str) -> None:
    """Remove ``root/rel`` (a sandbox may have replaced a directory on the way with a link: then nothing)."""
    parts = _parts(rel)
    with contextlib.suppress(FileNotFoundError, IsADirectoryError, Refused), _parent_fd(root, parts) as dfd:
        os.unlink(parts[-1], dir_fd=dfd)


_parent: tuple[int, Path] | None = None
_parent_lock = threading.Lock()


def _remove_parent(parent: Path) -> None:
    with contextlib.suppress(OSError):
        parent.rmdir()  # only when empty: a task still being removed keeps it


def task_state_dir() -> Path:
    """A fresh host directory for one task's agent state, mounted into its sandbox.

    Writable by anyone (the image's user may not be root), so it lives inside a 0700 directory of
    this process: no other user of the host can reach it through the shared temp directory.
    """
    global _parent
    with _parent_lock:
        if _parent is None or _parent[0] != os.getpid() or not _parent[1].is_dir():
            parent = Path(tempfile.mkdtemp(prefix=f"anyswe-state-{os.getpid()}-"))  # mkdtemp: 0700
            _parent = (os.getpid(), parent)
            atexit.register(_remove_parent, parent)
        parent = _parent[1]
    inner = Path(tempfile.mkdtemp(prefix="agent-", dir=parent))
    os.chmod(inner, 0o777)
    return inner
