"""How sandbox/oom.py tells a cgroup's OOM events from its removal (both signal the OOM eventfd)."""

from __future__ import annotations

import os
from pathlib import Path

from anyswe.sandbox.oom import OomWatch


def watch(cgroup: Path, ooms: int, removed: bool) -> OomWatch:
    """A watch whose eventfds hold what the kernel would have signalled (cgroup v1)."""
    oom_fd = os.eventfd(0, os.EFD_NONBLOCK)
    removal_fd = os.eventfd(0, os.EFD_NONBLOCK)
    if ooms + removed:
        os.eventfd_write(oom_fd, ooms + removed)
    if removed:
        os.eventfd_write(removal_fd, 1)
    return OomWatch(cgroup, oom_fd, removal_fd)


def test_a_cgroup_still_there_counts_every_signal_as_an_oom(tmp_path: Path) -> None:
    w = watch(tmp_path, ooms=2, removed=False)
    assert w.count(wait=0) == 2
    w.close()


def test_the_removal_alone_is_no_oom(tmp_path: Path) -> None:
    w = watch(tmp_path / "gone", ooms=0, removed=True)
    assert w.count() == 0
    assert w.count(wait=0) == 0  # asked again: the same answer
    w.close()


def test_an_oom_then_the_removal_is_one_oom(tmp_path: Path) -> None:
    w = watch(tmp_path / "gone", ooms=1, removed=True)
    assert w.count() == 1
    assert w.count(wait=0) == 1
    w.close()


def test_an_oom_whose_removal_is_not_signalled_yet_still_counts(tmp_path: Path) -> None:
    w = watch(tmp_path / "gone", ooms=1, removed=False)
    assert w.count(wait=0.1) == 1
    w.close()


def test_cgroup_v2_reads_the_oom_count_while_the_cgroup_is_there(tmp_path: Path) -> None:
    (tmp_path / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    assert OomWatch(tmp_path).count() == 1
    assert OomWatch(tmp_path / "gone").count() == 0
