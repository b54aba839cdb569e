"""Architectural rules that keep answers away from agents and imports cheap."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "anyswe"


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "import_module":
            found |= {a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)}
    return found


def test_agents_never_touch_grading() -> None:
    files = sorted((PKG / "agents").rglob("*.py"))
    assert len(files) >= 4
    for f in files:
        bad = {m for m in imported_modules(f) if m.startswith(("anyswe.grading", "swebench"))}
        assert not bad, f"{f.name} imports grading code: {bad}"
        text = f.read_text()
        for name in ("grade_patch", "eval_report", "get_eval_report", "test_patch", "FAIL_TO_PASS"):
            assert name not in text, f"{f.name} mentions {name}"


def test_only_the_adapter_imports_swebench() -> None:
    users = sorted(
        str(f.relative_to(PKG))
        for f in PKG.rglob("*.py")
        if "demo/tasks" not in str(f) and any(m.split(".")[0] == "swebench" for m in imported_modules(f))
    )
    assert users == ["grading/swebench.py"]


def test_import_anyswe_is_cheap() -> None:
    code = (
        "import sys, anyswe, anyswe.cli, anyswe.spec; "
        "heavy = [m for m in ('polars', 'swebench', 'python_on_whales', 'docker') if m in sys.modules]; "
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_public_api_resolves() -> None:
    import anyswe

    for name in anyswe.__all__:
        assert getattr(anyswe, name) is not None, name
