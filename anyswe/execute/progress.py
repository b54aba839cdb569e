"""Progress display: rich in a terminal, a tqdm widget in Jupyter, one line per task elsewhere."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from anyswe.results.schema import TaskResult


class Progress(Protocol):
    def advance(self, row: TaskResult) -> None: ...
    def close(self) -> None: ...


def in_jupyter() -> bool:
    try:
        from IPython import get_ipython  # type: ignore[attr-defined]
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and shell.__class__.__name__ == "ZMQInteractiveShell"


class _Silent:
    def advance(self, row: TaskResult) -> None:
        pass

    def close(self) -> None:
        pass


class _Lines:
    """One line per finished task on stderr (logs, CI)."""

    def __init__(self, total: int) -> None:
        self.total, self.done = total, 0

    def advance(self, row: TaskResult) -> None:
        self.done += 1
        verdict = "resolved" if row.resolved else (row.error_kind or "unresolved")
        print(
            f"[{self.done}/{self.total}] {row.cell} {row.instance_id} s{row.sample}: {verdict}",
            file=sys.stderr,
            flush=True,
        )

    def close(self) -> None:
        pass


class _Rich:
    def __init__(self, total: int, title: str) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as RichProgress

        self._p = RichProgress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[tally]}"),
            TimeElapsedColumn(),
            transient=False,
        )
        self._resolved = self._failed = 0
        self._task = self._p.add_task(title, total=total, tally="")
        self._p.start()

    def advance(self, row: TaskResult) -> None:
        self._resolved += row.resolved
        self._failed += row.error_kind is not None
        self._p.update(self._task, advance=1, tally=f"resolved {self._resolved}  errors {self._failed}")

    def close(self) -> None:
        self._p.stop()


class _Notebook:
    def __init__(self, total: int, title: str) -> None:
        from tqdm.auto import tqdm

        self._bar = tqdm(total=total, desc=title)
        self._resolved = 0

    def advance(self, row: TaskResult) -> None:
        self._resolved += row.resolved
        self._bar.set_postfix(resolved=self._resolved)
        self._bar.update(1)

    def close(self) -> None:
        self._bar.close()


def make_progress(total: int, title: str, *, enabled: bool = True) -> Progress:
    if not enabled:
        return _Silent()
    if in_jupyter():
        return _Notebook(total, title)
    if sys.stderr.isatty():
        return _Rich(total, title)
    return _Lines(total)
