"""Host-side reads of files a sandbox wrote: never through a link, regular files only, capped."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from anyswe._files import TaskDir, read_task_file, remove_task_file, task_state_dir
from anyswe.agents.hermes import HermesAgent, HermesConfig
from anyswe.sandbox.request import ExecResult

SENTINEL = "anyswe-sentinel-host-secret-5f1c"


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    p = tmp_path / "secret.txt"
    p.write_text(f"TOKEN={SENTINEL}\n")
    return p


def test_a_regular_file_is_read(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "a.log").write_text("hello\n")
    assert read_task_file(tmp_path, "logs/a.log") == "hello\n"
    assert read_task_file(tmp_path, "logs/missing.log") is None


def test_a_link_to_a_file_is_not_followed(tmp_path: Path, secret: Path) -> None:
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "errors.log").symlink_to(secret)
    text = read_task_file(tmp_path / "state", "errors.log")
    assert text is not None and SENTINEL not in text
    assert text == "[anyswe: errors.log not copied: it is a symbolic link]\n"


def test_a_linked_directory_on_the_way_is_not_followed(tmp_path: Path, secret: Path) -> None:
    (tmp_path / "state").mkdir()
    (tmp_path / "elsewhere" / "logs").mkdir(parents=True)
    os.link(secret, tmp_path / "elsewhere" / "logs" / "errors.log")
    (tmp_path / "state" / "hermes").symlink_to(tmp_path / "elsewhere")
    text = read_task_file(tmp_path / "state", "hermes/logs/errors.log")
    assert text is not None and SENTINEL not in text and "hermes is not a directory (a link or a file)" in text
    # Removing the token file through the link would delete a file outside the state dir: it does not.
    remove_task_file(tmp_path / "state", "hermes/logs/errors.log")
    assert (tmp_path / "elsewhere" / "logs" / "errors.log").read_text() == f"TOKEN={SENTINEL}\n"


def test_a_fifo_or_a_directory_is_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe", 0o600)  # nobody writes it: a plain open would block forever
    (tmp_path / "dir").mkdir()
    assert read_task_file(tmp_path, "pipe") == "[anyswe: pipe not copied: it is not a regular file (mode prw-------)]\n"
    dir_note = read_task_file(tmp_path, "dir")
    assert dir_note is not None and dir_note.startswith("[anyswe: dir not copied: it is not a regular file (mode d")


def test_a_large_file_is_capped_and_the_cut_is_noted(tmp_path: Path) -> None:
    (tmp_path / "big.log").write_text("a" * 100 + "z" * 100)
    head = read_task_file(tmp_path, "big.log", limit=150)
    assert head == "a" * 100 + "z" * 50 + "\n[anyswe: big.log: truncated at 150 bytes]\n"
    tail = read_task_file(tmp_path, "big.log", limit=150, tail=True)
    assert tail == "[anyswe: big.log: only the last 150 of 200 bytes]\n" + "a" * 50 + "z" * 100


def test_a_directory_opened_once_reads_each_file_as_read_task_file_does(tmp_path: Path, secret: Path) -> None:
    d = tmp_path / "tasks" / "k"
    d.mkdir(parents=True)
    (d / "a.log").write_text("a" * 100 + "z" * 100)
    (d / "link").symlink_to(secret)
    os.mkfifo(d / "pipe", 0o600)
    (d / "sub").mkdir()
    with TaskDir(tmp_path, "tasks/k") as task:
        assert task.names() == {"a.log", "link", "pipe", "sub"}
        for name in ("a.log", "link", "pipe", "sub", "missing"):
            for kw in ({}, {"limit": 150}, {"limit": 150, "tail": True}):
                assert task.read(name, **kw) == read_task_file(tmp_path, f"tasks/k/{name}", **kw), (name, kw)
        assert task.read("link") == "[anyswe: tasks/k/link not copied: it is a symbolic link]\n"
        with pytest.raises(ValueError, match="not a file name"):
            task.read("../secret.txt")
    # A linked directory on the way, or the directory itself: each file's note says so; none missing.
    (tmp_path / "tasks" / "linked").symlink_to(d)
    for rel in ("tasks/linked", "tasks/k/a.log"):
        with TaskDir(tmp_path, rel) as task:
            assert task.names() == set() and task.read("a.log") == read_task_file(tmp_path, f"{rel}/a.log")
            assert "is not a directory (a link or a file)" in str(task.read("a.log"))
    with TaskDir(tmp_path, "tasks/none") as task:
        assert task.names() == set() and task.read("a.log") is None


@pytest.mark.parametrize("rel", ["../x", "/etc/passwd", "a/../../x"])
def test_a_path_out_of_the_directory_is_a_bug(tmp_path: Path, rel: str) -> None:
    with pytest.raises(ValueError, match="not a relative path inside"):
        read_task_file(tmp_path, rel)


@pytest.mark.parametrize("target", ["secret", "/proc/self/environ"])
def test_hermes_does_not_copy_a_planted_link_to_the_hosts_files(tmp_path: Path, secret: Path, target: str) -> None:
    state = tmp_path / "state"
    (state / "hermes" / "logs").mkdir(parents=True)
    (state / "hermes" / "config.yaml").write_text("token")
    (state / "hermes" / "logs" / "errors.log").symlink_to(secret if target == "secret" else target)
    ctx: Any = None  # hermes' outcome reads only the state dir and the result
    outcome = HermesAgent(HermesConfig()).outcome(ctx, ExecResult(0, "done", "", 1.0), state)
    log = outcome.artifacts["hermes-errors.log"]
    assert SENTINEL not in log and "PATH=" not in log
    assert log == "[anyswe: hermes/logs/errors.log not copied: it is a symbolic link]\n"
    assert not (state / "hermes" / "config.yaml").exists()


def test_the_state_dir_is_open_inside_but_its_parent_is_private() -> None:
    a, b = task_state_dir(), task_state_dir()
    try:
        assert a.parent == b.parent and a != b
        assert stat.S_IMODE(a.parent.stat().st_mode) == 0o700 and a.parent.stat().st_uid == os.getuid()
        assert stat.S_IMODE(a.stat().st_mode) == 0o777
    finally:
        a.rmdir()
        b.rmdir()
