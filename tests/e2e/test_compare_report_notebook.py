"""Backend comparison on a real run, a planted flip, the HTML report in Chromium, the notebook in CI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from anyswe.cli import app
from anyswe.experiment import Experiment

pytestmark = pytest.mark.containers

REPO = Path(__file__).resolve().parents[2]

SPEC = """\
name: compare
dataset: {name: demo, instance_ids: [demo__calc-1, demo__leap-5, demo__stack-8, demo__wrap-6]}
agents:
  gold: {type: gold}
  noop: {type: noop}
providers:
  docker: {type: docker, concurrency: 4}
  apptainer: {type: apptainer, concurrency: 4, overlay_size_mb: 512}
concurrency: 6
"""


@pytest.fixture(scope="module")
def run_dir(runtimes: None, tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("compare")
    (tmp / "spec.yaml").write_text(SPEC)
    exp = Experiment.load(tmp / "spec.yaml", run_dir=tmp / "run")
    exp.run(progress=False)
    return tmp / "run"


def diff_json(*args: str) -> list[dict[str, object]]:
    r = CliRunner().invoke(app, ["diff", *args, "--json"])
    assert r.exit_code == 0, r.output
    return [json.loads(line) for line in r.output.splitlines()]


def test_backends_agree_fully(run_dir: Path) -> None:
    found = diff_json(str(run_dir), "--by", "provider")
    assert [(c["a"], c["b"]) for c in found] == [
        ("gold.none.docker", "gold.none.apptainer"),
        ("noop.none.docker", "noop.none.apptainer"),
    ]
    for c in found:
        assert c["agreement"] == 1.0 and c["pairs"] == 4 and c["masked_pairs"] == 0
        assert c["flips"] == {
            "resolved_only_in_a": {"count": 0, "instance_ids": []},
            "resolved_only_in_b": {"count": 0, "instance_ids": []},
        }
        assert c["delta"] == 0.0 and c["p_value"] == 1.0


def test_planted_disagreement_is_reported_exactly(run_dir: Path, tmp_path: Path) -> None:
    planted = tmp_path / "planted"
    shutil.copytree(run_dir, planted)
    rows = [json.loads(x) for x in (planted / "results.jsonl").read_text().splitlines()]
    for row in rows:
        if row["cell"] == "gold.none.apptainer" and row["instance_id"] == "demo__leap-5":
            row.update(resolved=False, reward=0.0)
        if row["cell"] == "gold.none.docker" and row["instance_id"] == "demo__wrap-6":
            row.update(mask_sample=True, error_kind="infra")
    (planted / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    gold = next(c for c in diff_json(str(planted)) if c["a"] == "gold.none.docker")
    assert gold["flips"] == {
        "resolved_only_in_a": {"count": 1, "instance_ids": ["demo__leap-5"]},
        "resolved_only_in_b": {"count": 0, "instance_ids": []},
    }
    assert gold["pairs"] == 3 and gold["masked_pairs"] == 1
    assert gold["agreement"] == pytest.approx(2 / 3) and gold["delta"] == pytest.approx(-1 / 3)
    assert gold["p_value"] == 1.0  # one discordant pair is no evidence
    # Between runs: the original against the planted copy, cell by cell.
    between = {c["a"]: c for c in diff_json(str(run_dir), str(planted))}
    assert between["A:gold.none.apptainer"]["flips"]["resolved_only_in_a"]["instance_ids"] == ["demo__leap-5"]


def test_exports(run_dir: Path) -> None:
    import polars as pl

    preds = [
        json.loads(x) for x in (run_dir / "cells" / "gold.none.docker" / "predictions.jsonl").read_text().splitlines()
    ]
    assert {p["instance_id"] for p in preds} == {"demo__calc-1", "demo__leap-5", "demo__stack-8", "demo__wrap-6"}
    assert all(
        p["model_name_or_path"] == "gold.none.docker" and p["model_patch"].startswith("diff --git") for p in preds
    )
    tasks = pl.read_parquet(run_dir / "tasks.parquet")
    assert tasks.height == 16 and {"key", "resolved", "mask_sample", "time_grading"} <= set(tasks.columns)
    r = CliRunner().invoke(app, ["results", str(run_dir), "--by", "repo", "--csv"])
    assert r.exit_code == 0 and r.output.startswith("cell,agent,model,provider,repo,tasks,resolved")


def test_report_renders_in_chromium(run_dir: Path, tmp_path: Path, chromium: str) -> None:
    out = tmp_path / "report.html"
    r = CliRunner().invoke(app, ["report", str(run_dir), "-o", str(out)])
    assert r.exit_code == 0, r.output
    page = out.read_text()
    assert "<script src" not in page and "http://" not in page and "https://" not in page  # self-contained
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tempfile.mkdtemp()}",
        "--enable-logging=stderr",
        "--v=0",
    ]
    shot = REPO / "tests" / "artifacts" / "report.png"
    shot.parent.mkdir(exist_ok=True)
    r1 = subprocess.run(
        [chromium, *flags, "--window-size=1280,2200", f"--screenshot={shot}", out.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shot.is_file() and shot.stat().st_size > 10_000, r1.stderr[-2000:]
    r2 = subprocess.run([chromium, *flags, "--dump-dom", out.as_uri()], capture_output=True, text=True, timeout=120)
    # The page's script ran to its end, and the console logged no error.
    assert 'data-ready="1"' in r2.stdout
    console = [line for line in (r1.stderr + r2.stderr).splitlines() if "CONSOLE" in line]
    assert not [line for line in console if "error" in line.lower() or "uncaught" in line.lower()], console
    assert "demo__leap-5" in r2.stdout and "gold.none.docker" in r2.stdout and "<svg" in r2.stdout


def test_notebook_runs_end_to_end(runtimes: None, tmp_path: Path) -> None:
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(REPO / "notebooks" / "verified_matrix.ipynb", as_version=4)
    env = {
        "ANYSWE_NOTEBOOK_SET": "dataset.instance_ids=[demo__calc-1, demo__slug-2]",
        "ANYSWE_NOTEBOOK_RUN_DIR": str(tmp_path / "run"),
    }
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        NotebookClient(
            nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(REPO / "notebooks")}}
        ).execute()
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    outputs = "".join(
        str(o.get("data", {}).get("text/plain", "")) + str(o.get("text", ""))
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
    )
    assert "all checks passed" in outputs
    assert (tmp_path / "run" / "results.jsonl").read_text().count("\n") == 8


def test_status_and_results_cli(run_dir: Path) -> None:
    r = CliRunner().invoke(app, ["status", str(run_dir)])
    assert r.exit_code == 0 and "gold.none.apptainer" in r.output
    line = next(x for x in r.output.splitlines() if "gold.none.docker" in x)
    assert [int(v) for v in line.replace("│", " ").split()[1:]] == [
        4,
        4,
        4,
        0,
        0,
    ]  # planned finished resolved errors pending
    r = CliRunner().invoke(app, ["results", str(run_dir), "--json"])
    rows = [json.loads(x) for x in r.output.splitlines()]
    assert {row["cell"]: row["resolve_rate"] for row in rows}["noop.none.docker"] == 0.0
    r = CliRunner().invoke(app, ["status", str(run_dir / "nope")])
    assert r.exit_code == 2 and "not a run directory" in r.output


def test_regrade_an_anyswe_run_directory(run_dir: Path) -> None:
    r = CliRunner().invoke(app, ["regrade", "demo", str(run_dir), "--json"])
    assert r.exit_code == 0, r.output
    regraded = {o["key"]: o for o in map(json.loads, r.output.splitlines())}
    rows = [json.loads(x) for x in (run_dir / "results.jsonl").read_text().splitlines()]
    graded = [row for row in rows if row["patch_applied"]]  # empty patches never ran tests
    assert len(graded) == 8
    for row in graded:
        assert regraded[row["key"]]["resolved"] == row["resolved"]
        assert regraded[row["key"]]["instance_id"] == row["instance_id"]
