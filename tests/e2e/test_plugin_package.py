"""A plugin package outside anyswe adds a benchmark and an agent through entry points
(examples/plugins/anyswe-example, docs/extending.md): installed by uv as any package is, a spec naming
both plans and runs on docker and apptainer, and nothing under anyswe/ names them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.gymkit import _uv

pytestmark = [pytest.mark.containers, pytest.mark.usefixtures("runtimes")]

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "examples" / "plugins" / "anyswe-example"
SPEC = PACKAGE / "spec.yaml"
#: What the plugin calls its benchmark, its agent, its package and its tasks.
ITS_NAMES = ("example-kata", "example-shell", "anyswe_example", "anyswe-example", "kata__")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package installed into a directory of its own (a wheel built by its own backend, as for any user)."""
    target = tmp_path_factory.mktemp("plugin-site")
    r = subprocess.run(
        [_uv(), "pip", "install", "-q", "--python", sys.executable, "--target", str(target), "--no-deps", str(PACKAGE)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    assert (target / "anyswe_example-0.1.0.dist-info" / "entry_points.txt").is_file()
    return target


def row_tests(instance_id: str) -> tuple[list[str], list[str]]:
    """FAIL_TO_PASS and PASS_TO_PASS as the plugin's own task file writes them."""
    tasks = json.loads((PACKAGE / "anyswe_example" / "tasks.json").read_text())
    task = next(t for t in tasks if t["instance_id"] == instance_id)
    return task["FAIL_TO_PASS"], task["PASS_TO_PASS"]


def _anyswe(*args: str, site: Path | None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if site is not None:
        env["PYTHONPATH"] = str(site)
    return subprocess.run(
        [sys.executable, "-m", "anyswe", *args], capture_output=True, text=True, timeout=1200, env=env, cwd=REPO
    )


def test_the_plugin_is_named_nowhere_in_anyswe() -> None:
    found = [
        f"{path.relative_to(REPO)}: {name}"
        for path in sorted((REPO / "anyswe").rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
        for name in ITS_NAMES
        if name.encode() in path.read_bytes()
    ]
    assert found == []


def test_without_the_package_its_names_are_unknown() -> None:
    r = _anyswe("plan", str(SPEC), site=None)
    assert r.returncode != 0
    # The first name the spec's loader meets: its agent's type, with the file and line.
    assert "spec.yaml:11:5: agents.shell.type: unknown agent type 'example-shell'" in r.stderr, r.stderr


def test_a_spec_with_the_plugins_benchmark_and_agent_runs_on_both_runtimes(site: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    r = _anyswe("apply", str(SPEC), "--out", str(out), site=site)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    got = sorted((r["agent"], r["provider"], r["instance_id"], r["resolved"], r["error_kind"]) for r in rows)
    # The plugin's agent fixes both of the plugin's tasks; anyswe's noop fixes neither; on both runtimes.
    assert got == sorted(
        (agent, provider, iid, agent == "shell", None)
        for agent in ("shell", "noop")
        for provider in ("docker", "apptainer")
        for iid in ("kata__roman-1", "kata__words-1")
    )
    plan = json.loads((out / "plan.json").read_text())
    assert plan["dataset"] == "example-kata" and plan["harness"] == "pytest"
    for row in rows:
        report = json.loads((out / "tasks" / row["key"] / "report.json").read_text())[row["instance_id"]]
        if row["agent"] == "noop":  # an empty patch is not graded, as in swebench
            assert report["patch_exists"] is False and report["tests_status"] == {}, row
            continue
        # Graded by the tests the plugin's rows name, with its test patch applied: all pass with the fix.
        statuses = report["tests_status"]
        assert statuses["FAIL_TO_PASS"] == {"success": row_tests(row["instance_id"])[0], "failure": []}, row
        assert statuses["PASS_TO_PASS"] == {"success": row_tests(row["instance_id"])[1], "failure": []}, row
    # The agent's plan-time check is the plugin's own: a command list for an id the dataset lacks.
    r = _anyswe("plan", str(SPEC), "--set", "agents.shell.commands.kata__nope-1=[true]", site=site)
    assert r.returncode != 0 and "kata__nope-1" in r.stderr, r.stdout + r.stderr
