"""Names and files that come from outside the host's trust: dataset ids and what a sandbox wrote.

An instance id becomes a directory name (``tasks/<key>``) and file names (scripts, predictions), so
it must be one plain path component. A file in a task's state directory was written by the agent
inside its sandbox: the host reads it only through :func:`read_task_file`, which never follows a
link, reads only a regular file, and caps what it reads (:class:`TaskDir`: several files of one
directory, opened once).
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


def _open_dir(root: Path, parts: list[str]) -> int:
    """A descriptor of ``root/parts...`` (the caller closes it), each step opened without following links."""
    fd = os.open(root, _DIR_FLAGS)
    try:
        for part in parts:
            try:
                step = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise Refused(f"{part} is not a directory (a link or a file)") from None
                raise
            os.close(fd)
            fd = step
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def _parent_fd(root: Path, parts: list[str]) -> Iterator[int]:
    """A descriptor of the directory holding ``parts[-1]``, each step opened without following links."""
    fd = _open_dir(root, parts[:-1])
    try:
        yield fd
    finally:
        os.close(fd)


def _read_at(dfd: int, name: str, rel: str, limit: int, tail: bool, errors: str) -> str | None:
    """The text of file ``name`` in the directory ``dfd`` as :func:`read_task_file` gives it (``rel``
    names it in notes). A link is refused by O_NOFOLLOW, anything but a regular file by its fstat."""
    try:
        try:
            fd = os.open(name, _FILE_FLAGS, dir_fd=dfd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise Refused("it is a symbolic link") from None
            raise
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise Refused(f"it is not a regular file (mode {stat.filemode(st.st_mode)})")
            if tail and st.st_size > limit:
                os.lseek(fd, st.st_size - limit, os.SEEK_SET)
            data = _read_fd(fd, limit + 1)
        finally:
            os.close(fd)
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


def _read_fd(fd: int, most: int) -> bytes:
    """Up to ``most`` bytes of ``fd`` (plain reads: a buffered file object per file cost as much as the read)."""
    parts, left = [], most
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 24))
        if not chunk:
            break
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def read_task_file(
    root: Path, rel: str, *, limit: int = READ_LIMIT, tail: bool = False, errors: str = "replace"
) -> str | None:
    """The text of ``root/rel``, a file a sandbox could write; None when it does not exist.

    Never through a symbolic link (at any step), only a regular file, at most ``limit`` bytes (the
    first, or the last with ``tail``), the truncation noted in the text. A file that is refused
    gives a one-line note saying why instead of its content. ``errors``: how bytes that are not
    UTF-8 are decoded (``surrogateescape`` keeps them, for a reader that names where they are).
    Several files of one directory: :class:`TaskDir` opens it once.
    """
    parts = _parts(rel)
    with TaskDir(root, "/".join(parts[:-1])) as directory:
        return directory.read(parts[-1], limit=limit, tail=tail, errors=errors)


class TaskDir:
    """One directory a sandbox could write (``root/rel``; ``root`` itself for ``""``), opened once to
    read several of its files by name: what :func:`read_task_file` gives for ``rel/name``, the same
    notes, without walking the path again for each (the report reads five files of each of 10,000
    tasks). Use it as a context manager.

    The path is opened as :func:`read_task_file` opens it (no link followed at any step); where that
    fails, every file read gives the note that reading it alone would, and :meth:`names` is empty.
    """

    def __init__(self, root: Path, rel: str) -> None:
        self.rel = rel
        self._fd: int | None = None
        self._why: str | None = None  # None with no descriptor: the directory is not there
        try:
            self._fd = _open_dir(root, _parts(rel) if rel else [])
        except FileNotFoundError:
            pass
        except Refused as exc:
            self._why = str(exc)
        except OSError as exc:
            self._why = exc.strerror or str(exc)

    def __enter__(self) -> TaskDir:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def read(self, name: str, *, limit: int = READ_LIMIT, tail: bool = False, errors: str = "replace") -> str | None:
        """The text of file ``name`` (one path component) of the directory, as :func:`read_task_file` reads it."""
        if not name or "/" in name or name in (".", ".."):
            raise ValueError(f"not a file name: {name!r}")
        rel = f"{self.rel}/{name}" if self.rel else name
        if self._fd is None:
            return None if self._why is None else f"[anyswe: {rel} not copied: {self._why}]\n"
        return _read_at(self._fd, name, rel, limit, tail, errors)

    def names(self) -> set[str]:
        """The names in the directory (one listing of the open descriptor; empty when it is not open)."""
        if self._fd is None:
            return set()
        try:
            return set(os.listdir(self._fd))
        except OSError:
            return set()


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


_scratch = threading.local()


def scratch_file(text: str) -> str:
    """A file holding ``text``, for a reader that takes a path (swebench's ``get_eval_report`` reads a log
    from one): one per thread (mode 0600), rewritten each time rather than a directory made and removed."""
    path: str | None = getattr(_scratch, "path", None)
    if path is None:
        fd, path = tempfile.mkstemp(prefix="anyswe-grade-", suffix=".txt")
        os.close(fd)
        atexit.register(_remove_quietly, path)
        _scratch.path = path
    Path(path).write_text(text)
    return path


def _remove_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
