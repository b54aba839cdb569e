"""The swebench harness inside real containers: SWE-bench-shaped demo images, swebench's own eval script."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from anyswe.experiment import Experiment

pytestmark = pytest.mark.containers

SPEC = """\
name: swe-shaped
dataset:
  name: demo-swebench
  instance_ids: [demo__calc-1, demo__inventory-4, demo__settings-3]
agents:
  gold: {type: gold}
  noop: {type: noop}
providers:
  docker: {type: docker, concurrency: 3}
  apptainer: {type: apptainer, concurrency: 3, overlay_size_mb: 512}
concurrency: 4
"""


def test_gold_resolves_and_noop_does_not_through_swebench(runtimes: None, tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    exp = Experiment.load(spec, run_dir=tmp_path / "run")
    exp.run(progress=False)
    df = exp.results()
    assert df.height == 12 and df["error_kind"].is_null().all()
    assert set(df["harness"]) == {"swebench"}
    assert df.filter(pl.col("agent") == "gold")["resolved"].all()
    assert not df.filter(pl.col("agent") == "noop")["resolved"].any()
    key = df.filter((pl.col("agent") == "gold") & (pl.col("instance_id") == "demo__inventory-4"))["key"][0]
    task = exp.run_dir / "tasks" / key
    script = (task / "eval.sh").read_text()
    # swebench's make_eval_script_list, not ours: conda activation and its heredoc delimiter.
    assert "source /opt/miniconda3/bin/activate" in script and "conda activate testbed" in script
    # inventory's -rA lives in its setup.cfg, edited by its spec's pre_install and committed as the
    # image's "SWE-bench" setup commit, as sphinx's lives in tox.ini: without that edit in force no
    # test would be reported, and gold could not resolve.
    assert (
        "EOF_114329324912" in script
        and "pytest -p no:cacheprovider tests/test_inventory.py tests/test_limits.py" in script
    )
    log = (task / "test_output.txt").read_text()
    assert "+ : '>>>>> Start Test Output'" in log
    assert "PASSED tests/test_limits.py::test_stock_never_negative" in log
    assert (
        "    SWE-bench\n" in log and "-addopts = --strict-markers\n+addopts = -rA --strict-markers" in log
    )  # git show
    # The captured patch starts from the setup commit: it never carries the reverse of its edit.
    assert "setup.cfg" not in (task / "patch.diff").read_text()
