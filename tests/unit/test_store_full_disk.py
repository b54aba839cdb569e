"""A full disk never leaves a torn line between good rows, and the run's writer says what happened."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from anyswe.errors import ResultsError
from anyswe.results.schema import TaskResult
from anyswe.results.store import RunStore, read_results


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs (root is needed to mount one, as in CI)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True)
    if r.returncode != 0:
        pytest.fail(f"cannot mount a tmpfs: {r.stderr.decode()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def row(n: int) -> TaskResult:
    return TaskResult.model_validate(
        {"key": f"k{n}", "cell": "c", "agent": "a", "provider": "p", "provider_type": "docker", "instance_id": "i"}
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
    subprocess.run(["mount", "-o", "remount,size=4m", str(small_disk)], check=True)
    with RunStore(run) as store:
        store.append(row(written))
    assert [r.key for r in read_results(run / "results.jsonl")] == [f"k{n}" for n in range(written + 1)]
