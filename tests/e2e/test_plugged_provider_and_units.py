"""The seams later features plug into: a provider from a dotted path in a spec, and units of work
that pickle and run in a fresh process."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import polars as pl
import pytest
from pydantic import Field

from anyswe.execute.unit import make_unit
from anyswe.experiment import Experiment
from anyswe.results.schema import TaskResult
from anyswe.sandbox import NetworkPolicy, SandboxRequest
from anyswe.sandbox.docker import DockerConfig, DockerProvider

pytestmark = pytest.mark.containers

REPO = Path(__file__).resolve().parents[2]


class CountingConfig(DockerConfig):
    """A config of its own: its fields are validated from the spec like any provider's."""

    type: str = f"{__name__}:CountingDocker"
    label: str = Field(min_length=1)


class CountingDocker(DockerProvider):
    """A third provider, plugged in from a spec by dotted path: docker, counting its sandboxes."""

    name = "counting"
    config_class = CountingConfig
    started: ClassVar[list[str]] = []

    async def _start(self, request: SandboxRequest, network: NetworkPolicy) -> None:
        CountingDocker.started.append(request.image)
        await super()._start(request, network)


SPEC = f"""\
name: plugged
dataset: {{name: demo}}
agents:
  gold: {{type: gold}}
  noop: {{type: noop}}
providers:
  mine: {{type: "{__name__}:CountingDocker", label: x, memory: 2g}}
"""


def test_provider_from_a_dotted_path_runs_the_demo(runtimes: None, tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    # The provider's own config class validates its block: a missing field is named with its line.
    bad = tmp_path / "bad.yaml"
    bad.write_text(SPEC.replace("label: x, ", ""))
    from anyswe.errors import SpecError

    with pytest.raises(SpecError, match=r"bad\.yaml:7:\d+: providers\.mine\.label: Field required"):
        Experiment.load(bad)
    CountingDocker.started.clear()
    exp = Experiment.load(spec, run_dir=tmp_path / "run")
    summary = exp.run(progress=False)
    assert summary.ran == 16 and summary.errors == 0
    df = exp.results()
    assert set(df["provider"]) == {"mine"} and set(df["provider_type"]) == {f"{__name__}:CountingDocker"}
    assert df.filter(pl.col("agent") == "gold")["resolved"].all()
    assert not df.filter(pl.col("agent") == "noop")["resolved"].any()
    # gold: an agent and a grading sandbox per task; noop: an agent sandbox only (empty patch).
    assert len(CountingDocker.started) == 8 * 2 + 8


def test_units_pickle_and_run_in_a_fresh_process(runtimes: None, tmp_path: Path) -> None:
    exp = Experiment.load(REPO / "specs" / "demo.yaml", run_dir=tmp_path / "run")
    units = [make_unit(exp.planned, t, run_id="pickled", attempt=1) for t in exp.planned.tasks]
    assert len(units) == 32
    for unit in units:
        again = pickle.loads(pickle.dumps(unit))
        assert again == unit and again.instance.patch == unit.instance.patch
    unit = next(u for u in units if u.cell.agent == "gold" and u.cell.provider == "apptainer")
    script = (
        "import pickle, sys\n"
        "from anyswe.execute.worker import run_unit\n"
        "out = run_unit(pickle.load(sys.stdin.buffer))\n"
        "sys.stdout.write(pickle.dumps(out).hex())\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], input=pickle.dumps(unit), capture_output=True, timeout=600, check=False
    )
    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    out: Any = pickle.loads(bytes.fromhex(proc.stdout.decode()))
    result = TaskResult.model_validate(out.result.model_dump())
    assert (result.key, result.run_id, result.provider, result.resolved) == (unit.key, "pickled", "apptainer", True)
    assert result.image and result.image.endswith(".sif")
    assert "FAIL_TO_PASS" in out.artifacts["report.json"] and out.artifacts["patch.diff"] == result.model_patch
    # The worker wrote nothing: only a driver writes a run directory.
    assert not (tmp_path / "run").exists()
