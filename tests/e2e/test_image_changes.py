"""An image whose own build changed its work tree (issue 51): SWE-bench Multilingual's jq images
regenerate tracked files (``src/lexer.c`` from ``lexer.l`` with the image's flex) and builds may leave
files no ``.gitignore`` names. On docker and apptainer the agent's patch holds only its own change, the
row records what the image changed, and the patch, graded in a fresh sandbox of the image (which has
those changes already), resolves. Before, the capture was against HEAD: the gold patch came back with
the build's files in it and failed to apply, unresolved with no error (measured on jq-2750)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from anyswe.config import base_image
from anyswe.experiment import Experiment
from anyswe.grading import diffs

pytestmark = pytest.mark.containers

SPEC = """\
name: image-changes
dataset: {{name: demo-swebench, instance_ids: [demo__calc-1]}}
agents:
  gold: {{type: gold}}
  noop: {{type: noop}}
providers:
  docker: {{type: docker, concurrency: 2, image: "{image}"}}
  apptainer: {{type: apptainer, concurrency: 2, overlay_size_mb: 512, image: "{image}"}}
concurrency: 4
"""


def test_what_the_image_changed_is_never_in_the_agents_patch(runtimes: None, tmp_path: Path) -> None:
    from python_on_whales import docker

    from anyswe.datasets import load_dataset
    from anyswe.sandbox.store import build_image

    bench = load_dataset("demo-swebench")
    assert bench.build_context is not None
    dockerfile, demo = bench.build_context("demo__calc-1", base_image())
    asyncio.run(build_image(dockerfile, demo))
    # The build's doing: a tracked file regenerated, a file left that no .gitignore names.
    tag = f"anyswe-test/image-changes:{uuid.uuid4().hex[:8]}"
    (tmp_path / "ctx").mkdir()
    (tmp_path / "ctx" / "Dockerfile").write_text(
        f"FROM {demo}\nRUN cd /testbed && echo '# regenerated' >> README.md && echo built > build.log\n"
    )
    asyncio.run(build_image(tmp_path / "ctx" / "Dockerfile", tag))
    gold_files = diffs.touched_files(bench.by_id()["demo__calc-1"].patch)
    try:
        (tmp_path / "spec.yaml").write_text(SPEC.format(image=tag))
        exp = Experiment.load(tmp_path / "spec.yaml", run_dir=tmp_path / "run")
        exp.run(progress=False)
        rows = {(r["agent"], r["provider"]): r for r in exp.results().iter_rows(named=True)}
    finally:
        docker.image.remove(tag, force=True)
    assert len(rows) == 4
    for (agent, provider), row in rows.items():
        assert row["error_kind"] is None, row["error"]
        assert sorted(row["image_changes"]) == ["README.md", "build.log"], (agent, provider, row["image_changes"])
        if agent == "gold":
            assert diffs.touched_files(row["model_patch"]) == gold_files, (provider, row["model_patch"][:800])
            assert row["resolved"] and row["patch_applied"], (provider, row["error"])
        else:
            assert row["model_patch"] == "" and not row["resolved"], provider
        log = (exp.run_dir / "tasks" / row["key"] / "agent.log").read_text()
        assert "work tree as the image ships it: 2 path(s) changed" in log, log[-2000:]
