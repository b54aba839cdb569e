"""A sandbox's disk limit where the runtime has none (anyswe/sandbox/disk.py): sizes, how a daemon's storage
driver decides the mechanism, and the measure of a writable layer. The watchdog stopping a real container
past its limit, on docker, and apptainer's overlay doing the same: tests/e2e/test_hostile.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from anyswe.errors import SpecError
from anyswe.sandbox.disk import DiskLimits, size_bytes, used_bytes
from anyswe.sandbox.docker import DockerConfig


def test_sizes_read_as_docker_reads_them() -> None:
    assert (
        size_bytes("4g") == 4 * 1024**3 and size_bytes("300m") == 300 * 1024**2 and size_bytes("1.5G") == 1536 * 1024**2
    )
    assert size_bytes("1048576") == 1024**2 and size_bytes("10kb") == 10240
    with pytest.raises(ValueError, match="not a size"):
        size_bytes("lots")


def test_a_bad_disk_size_is_the_specs_error_at_its_field(tmp_path: Path) -> None:
    from anyswe.spec import load_spec

    spec = tmp_path / "s.yaml"
    spec.write_text(
        "name: s\ndataset: {name: demo}\nagents: {g: {type: gold}}\nproviders:\n  d: {type: docker, disk: lots}\n"
    )
    with pytest.raises(SpecError, match=r"s\.yaml:5:.*providers\.d\.disk.*not a size"):
        load_spec(spec)
    assert DockerConfig(disk=None).disk is None and DockerConfig().disk == "4g"


def test_the_default_disk_limit_keeps_the_keys_of_runs_made_before_it() -> None:
    assert "disk" not in DockerConfig().key_payload()
    assert DockerConfig(disk="10g").key_payload()["disk"] == "10g"


@pytest.mark.parametrize(
    ("driver", "backing", "mechanism"),
    [("overlay2", "extfs", "watchdog"), ("overlay2", "xfs", "storage-opt"), ("btrfs", "btrfs", "storage-opt"),
     ("zfs", "zfs", "storage-opt"), ("vfs", "extfs", "watchdog")],
)  # fmt: skip
def test_the_mechanism_follows_the_daemons_storage_driver(driver: str, backing: str, mechanism: str) -> None:
    limits = DiskLimits(300 * 1024**2)
    limits.choose(f"{json.dumps(driver)}|{json.dumps([['Backing Filesystem', backing], ['x', 'y']])}\n".encode())
    assert limits.mechanism == mechanism
    limits.refused()  # overlay2 over xfs without pquota: docker refuses the option
    assert limits.mechanism == "watchdog" and "anyswe's watchdog" in limits.note()
    unreadable = DiskLimits(1)
    unreadable.choose(b"Cannot connect to the Docker daemon")
    assert unreadable.mechanism == "watchdog"
    assert DiskLimits(None).mechanism == "none" and DiskLimits(None).note() == "no disk limit"


def test_a_layer_is_measured_by_what_its_files_take_each_once(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "big").write_bytes(os.urandom(1 << 20))
    os.link(tmp_path / "a" / "big", tmp_path / "hardlink")  # the same blocks: counted once
    (tmp_path / "sparse").touch()
    os.truncate(tmp_path / "sparse", 1 << 30)  # a gigabyte that takes no blocks
    (tmp_path / "link").symlink_to("/usr")  # not followed
    used = used_bytes(str(tmp_path))
    assert (1 << 20) <= used < (1 << 20) + 256 * 1024
    assert used_bytes(str(tmp_path / "missing")) == 0
