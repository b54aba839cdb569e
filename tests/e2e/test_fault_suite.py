"""The fault-injection suite in CI (tests/e2e/faultkit.py; more rounds and figures: run it as a script)."""

from __future__ import annotations

import random
import signal
from pathlib import Path

import pytest
from faultkit import Figures, dockerd_restart, full_disk, orchestrator_signal, sandbox_faults

pytestmark = pytest.mark.containers


def assert_clean(f: Figures) -> None:
    assert f.faults > 0, f"no fault was injected: {f}"
    assert f.ok, f"{f.scenario} on {f.provider}: {f}"


@pytest.mark.parametrize("provider", ["docker", "apptainer"])
def test_sandboxes_killed_and_stopped_in_every_phase(runtimes: None, tmp_path: Path, provider: str) -> None:
    f = sandbox_faults(tmp_path, provider)
    assert f.faults >= 3, f
    assert_clean(f)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_orchestrator_killed_at_a_random_point_on_apptainer(
    runtimes: None, tmp_path: Path, sig: signal.Signals
) -> None:
    # docker's SIGINT/SIGTERM/SIGKILL paths are in test_resume.py; the moment here is random (seeded per run).
    assert_clean(orchestrator_signal(tmp_path, "apptainer", sig, random.Random()))


def test_dockerd_restarted_mid_run(runtimes: None, tmp_path: Path) -> None:
    assert_clean(dockerd_restart(tmp_path))


def test_run_directory_disk_full(runtimes: None, tmp_path: Path) -> None:
    assert_clean(full_disk(tmp_path))
