"""The unit tier (``-m "not containers"``, ``just test-unit``) holds no test that needs a runtime.

tests/conftest.py marks by directory and by fixture; this runs that very conftest over a small tree
(a fresh pytest, seconds: collecting the real e2e modules costs tens of seconds of imports) with a
test of each kind that forgot its marker.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"

TREE = {
    "e2e/test_forgot_e2e.py": "def test_e2e_without_marker():\n    pass\n",
    "containers/test_forgot_containers.py": "def test_containers_without_marker():\n    pass\n",
    "unit/test_fixture.py": "def test_asks_for_docker(docker_image):\n    pass\n\n"
    "def test_asks_for_both(provider_image):\n    pass\n",
    "unit/test_marked.py": "import pytest\n\n@pytest.mark.containers\ndef test_marked_by_hand():\n    pass\n",
    "unit/test_plain.py": "def test_plain():\n    pass\n",
}


def _collected(root: Path, *args: str) -> set[str]:
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "--strict-markers", *args],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=120,
    )
    assert r.returncode in (0, 5), r.stdout[-3000:] + r.stderr[-3000:]  # 5: nothing selected
    return {line.split("::")[-1].split("[")[0] for line in r.stdout.splitlines() if "::" in line}


def test_only_tests_that_need_no_runtime_are_in_the_unit_tier(tmp_path: Path) -> None:
    root = tmp_path / "project"
    (root / "tests").mkdir(parents=True)
    shutil.copy(CONFTEST, root / "tests" / "conftest.py")
    (root / "pytest.ini").write_text("[pytest]\ntestpaths = tests\nmarkers =\n    containers: needs runtimes\n")
    for name, text in TREE.items():
        (root / "tests" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "tests" / name).write_text(text)
    assert _collected(root, "-m", "not containers") == {"test_plain"}
    assert _collected(root, "-m", "containers") == {
        "test_e2e_without_marker",
        "test_containers_without_marker",
        "test_asks_for_docker",
        "test_asks_for_both",
        "test_marked_by_hand",
    }
