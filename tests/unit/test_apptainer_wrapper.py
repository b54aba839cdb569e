"""The wrapper that runs apptainer from its own root (scripts/apptainer-wrapper.sh): a failure of the
wrapper itself reads as the runtime's failure (exit 255, FATAL), as apptainer reports its own, so a
task gets an infra error rather than an exit code passed off as its command's."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "apptainer-wrapper.sh"

#: The wrapper enters a mount namespace, which needs root: a user runs it as root of a user namespace
#: of its own (what the wrapper does there is the same), so the test holds whoever runs it.
AS_ROOT = [] if os.geteuid() == 0 else ["unshare", "--user", "--map-root-user"]


#: The root provisioned by scripts/provision.sh (its default APPTAINER_ROOT).
PROVISIONED = Path("/var/lib/anyswe/apptainer-root")


def _fake_root(tmp_path: Path) -> Path:
    """A root with an `apptainer` but no /proc to mount onto: the wrapper's own step fails."""
    root = tmp_path / "root"
    (root / "usr" / "bin").mkdir(parents=True)
    fake = root / "usr" / "bin" / "apptainer"
    fake.write_text('#!/bin/sh\necho "fake apptainer $*"\n')
    fake.chmod(0o755)
    return root


def _run(tmp_path: Path, root: Path) -> subprocess.CompletedProcess[str]:
    wrapper = tmp_path / "apptainer"
    wrapper.write_text(SCRIPT.read_text().replace("@APPTAINER_ROOT@", str(root)))
    wrapper.chmod(0o755)
    env = {**os.environ, "ANYSWE_APPTAINER_ROOT": str(root)}
    return subprocess.run([*AS_ROOT, str(wrapper), "--version"], capture_output=True, text=True, env=env, timeout=60)


def test_a_wrapper_failure_is_reported_as_apptainer_reports_its_own(tmp_path: Path) -> None:
    r = _run(tmp_path, _fake_root(tmp_path))
    assert r.returncode == 255 and "FATAL:" in r.stderr and "anyswe apptainer wrapper" in r.stderr, r


@pytest.mark.containers  # runs the provisioned apptainer
def test_the_wrapper_in_the_checkout_enters_the_provisioned_root(tmp_path: Path) -> None:
    r = _run(tmp_path, PROVISIONED)
    assert r.returncode == 0 and r.stdout.startswith("apptainer version "), r


@pytest.mark.containers  # runs the provisioned apptainer on a real SIF
def test_a_bind_source_outside_the_known_directories_and_the_cwd_is_found(tmp_path: Path, sif_image: str) -> None:
    """A checkout outside the wrapper's list (CI's clone lived under /check) binds the tests' record
    plugin from itself, and a notebook's kernel runs from another directory: the wrapper binds what the
    command names, not only its cwd. /media is a tmpfs of this test's own mount namespace."""
    wrapper = tmp_path / "apptainer"
    wrapper.write_text(SCRIPT.read_text().replace("@APPTAINER_ROOT@", str(PROVISIONED)))
    wrapper.chmod(0o755)
    script = (
        "mount -t tmpfs none /media && mkdir /media/checkout && echo found-it >/media/checkout/probe.txt && cd / && "
        f'exec "$0" exec --contain --bind /media/checkout/probe.txt:/mnt/probe.txt:ro {sif_image} cat /mnt/probe.txt'
    )
    r = subprocess.run(
        [*AS_ROOT, "unshare", "--mount", "--propagation", "private", "sh", "-c", script, str(wrapper)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0 and r.stdout.strip() == "found-it", r
