"""The unit tier (``-m "not containers"``, ``just test-unit``) holds no test that needs a runtime:
nothing from tests/e2e or tests/containers, nothing that asks for a runtime fixture. Checked on the
real collection in a fresh pytest, so a module that forgets its marker cannot slip in."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def _collected(*args: str) -> list[str]:
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args, str(TESTS)],
        capture_output=True,
        text=True,
        cwd=TESTS.parent,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return [line for line in r.stdout.splitlines() if "::" in line]


def test_the_unit_tier_has_no_test_that_needs_a_runtime() -> None:
    # One collection (it imports every test module: tens of seconds on a busy machine).
    unit = _collected("-m", "not containers")
    assert any(t.startswith("tests/unit/") for t in unit)
    assert not [t for t in unit if not t.startswith("tests/unit/")], "e2e or containers tests in the unit tier"
    # A unit-dir test that needs a runtime carries the marker itself.
    wrapper = "tests/unit/test_apptainer_wrapper.py::test_the_wrapper_in_the_checkout_enters_the_provisioned_root"
    assert wrapper not in unit and "tests/unit/test_apptainer_wrapper.py::test_a_wrapper_failure" in " ".join(unit)
