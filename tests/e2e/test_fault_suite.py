"""The fault-injection suite in CI (tests/e2e/faultkit.py; more rounds and figures: run it as a script)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from faultkit import SEED_VAR, Figures, dockerd_restart, fault_seed, full_disk, sandbox_faults

pytestmark = pytest.mark.containers

#: One seed per session, from $ANYSWE_FAULT_SEED or fresh; every random moment derives from it.
SEED = fault_seed()


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> random.Random:
    """This test's own generator (seeded by the session's seed and the test's id, so a test run alone
    repeats what it did in the whole suite). The seed is in pytest's header (tests/conftest.py) and in
    a report section that a failure shows."""
    line = f"fault seed {SEED} ({SEED_VAR}={SEED} to repeat {request.node.nodeid})"
    request.node.add_report_section("setup", "fault seed", line)
    return random.Random(f"{SEED}:{request.node.nodeid}")


def assert_clean(f: Figures) -> None:
    assert f.faults > 0, f"no fault was injected: {f} ({SEED_VAR}={SEED})"
    assert f.ok, f"{f.scenario} on {f.provider}: {f} ({SEED_VAR}={SEED})"


@pytest.mark.parametrize("provider", ["docker", "apptainer"])
def test_sandboxes_killed_and_stopped_in_every_phase(runtimes: None, tmp_path: Path, provider: str) -> None:
    f = sandbox_faults(tmp_path, provider)
    assert f.faults >= 3, f
    assert_clean(f)


@pytest.mark.exclusive  # every container of a concurrent test dies with dockerd
def test_dockerd_restarted_mid_run(runtimes: None, tmp_path: Path) -> None:
    assert_clean(dockerd_restart(tmp_path))


def test_run_directory_disk_full(runtimes: None, tmp_path: Path) -> None:
    assert_clean(full_disk(tmp_path))
