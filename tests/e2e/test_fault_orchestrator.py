"""The fault-injection suite's orchestrator kills in CI (tests/e2e/faultkit.py): an apply killed with
SIGKILL or SIGTERM at a random moment (seeded), then applied again; every task recorded once, with its
verdict or a masked infra error, and nothing left behind. (Sandbox faults, a dockerd restart and a full
disk: test_fault_suite.py.)"""

from __future__ import annotations

import random
import signal
from pathlib import Path

import pytest
from faultkit import orchestrator_signal
from test_fault_suite import assert_clean, rng

__all__ = ["rng"]  # the fixture, used by name

pytestmark = pytest.mark.containers


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_orchestrator_killed_at_a_random_point_on_apptainer(
    runtimes: None, tmp_path: Path, sig: signal.Signals, rng: random.Random
) -> None:
    # docker's SIGINT/SIGTERM/SIGKILL paths are in test_resume.py; the moment here is random (seeded).
    assert_clean(orchestrator_signal(tmp_path, "apptainer", sig, rng))
