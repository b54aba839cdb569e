"""A full disk never leaves a torn line between good rows, and the run's writer says what happened."""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from anyswe.errors import ResultsError
from anyswe.results.schema import TaskResult
from anyswe.results.store import RunStore, read_results

#: The tmpfs's size, and the ballast that leaves it 64 KiB free; removing the ballast is the space
#: coming back (the same as root and as a user: a user cannot remount a bigger size from outside).
DISK, BALLAST = 256 * 1024, 192 * 1024


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A small tmpfs, 64 KiB free. As root (CI) it is mounted here; as any other user in a user and
    mount namespace of its own, held by a child process and reached through its /proc/PID/root, so
    the test runs, and means the same, whoever runs it."""
    mount = tmp_path / "disk"
    mount.mkdir()
    tmpfs = ["mount", "-t", "tmpfs", "-o", f"size={DISK}", "tmpfs", str(mount)]
    holder = None
    if os.geteuid() == 0:
        r = subprocess.run(tmpfs, capture_output=True)
        if r.returncode != 0:
            pytest.fail(f"cannot mount a tmpfs: {r.stderr.decode()}")
        disk = mount
    else:
        holder = subprocess.Popen(
            [
                "unshare",
                "--user",
                "--map-root-user",
                "--mount",
                "sh",
                "-c",
                f"{shlex.join(tmpfs)} && echo ready && exec sleep 3600",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert holder.stdout is not None and holder.stderr is not None
        if holder.stdout.readline() != b"ready\n":
            holder.wait(timeout=30)
            pytest.fail(f"cannot mount a tmpfs in a user namespace: {holder.stderr.read().decode()}")
        disk = Path(f"/proc/{holder.pid}/root") / mount.relative_to("/")
    (disk / "ballast").write_bytes(b"\0" * BALLAST)
    try:
        yield disk
    finally:
        if holder is None:
            subprocess.run(["umount", "-l", str(mount)], check=False)
        else:
            holder.kill()
            holder.wait()


def row(n: int) -> TaskResult:
    return TaskResult.model_validate(
        {
            "key": f"{n:016x}__i",
            "cell": "c",
            "agent": "a",
            "provider": "p",
            "provider_type": "docker",
            "instance_id": "i",
        }
        | {"repo": "r", "sample": 0, "attempt": 1, "spec": "s", "run_id": "x", "model_patch": "+" * 3000}
    )


def test_append_on_a_full_disk_is_all_or_nothing(small_disk: Path) -> None:
    run = small_disk / "run"
    written = 0
    with RunStore(run) as store, pytest.raises(ResultsError, match="No space left on device"):
        for n in range(1000):
            store.append(row(n))
            written += 1
    assert 0 < written < 1000
    data = (run / "results.jsonl").read_bytes()
    assert data.endswith(b"\n") and len(read_results(run / "results.jsonl")) == written
    # Space comes back: the run goes on from a clean file.
    (small_disk / "ballast").unlink()
    with RunStore(run) as store:
        store.append(row(written))
    assert [r.key for r in read_results(run / "results.jsonl")] == [f"{n:016x}__i" for n in range(written + 1)]
