"""`anyswe gc` also collects the files a killed run leaves: interrupted SIF builds and host scratch dirs."""

from __future__ import annotations

import fcntl
import tempfile
from pathlib import Path

import pytest

from anyswe.sandbox.labels import collect_scratch, scratch_prefix
from anyswe.sandbox.sif import collect_interrupted_builds

# Above the kernel's pid_max (2^22): no process can have it.
DEAD_PID = 99_999_999


def test_scratch_dirs_of_dead_owners_only() -> None:
    dead = Path(tempfile.mkdtemp(prefix=f"anyswe-sbx-{DEAD_PID}-"))
    (dead / "env").write_text("x")
    live = Path(tempfile.mkdtemp(prefix=scratch_prefix()))
    try:
        removed = collect_scratch()
        assert str(dead) in removed and not dead.exists()
        assert str(live) not in removed and live.is_dir()
    finally:
        live.rmdir()


def test_interrupted_sif_builds_unless_one_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANYSWE_CACHE", str(tmp_path))
    killed = tmp_path / "sif" / "build-aaaa-x1"
    running = tmp_path / "sif" / "build-bbbb-x2"
    for d in (killed, running):
        d.mkdir(parents=True)
        (d / "image.tar").write_bytes(b"\0" * 1024)
    (tmp_path / "sif" / "cccc.sif").write_bytes(b"a finished SIF")
    (tmp_path / "locks").mkdir()
    with open(tmp_path / "locks" / "sif-bbbb.lock", "w") as held:
        # Another process's build holds the lock (a separate open file: flock conflicts as across processes).
        fcntl.flock(held, fcntl.LOCK_EX)
        assert collect_interrupted_builds() == [str(killed)]
    assert not killed.exists() and running.is_dir() and (tmp_path / "sif" / "cccc.sif").is_file()
