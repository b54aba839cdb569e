"""A matrix over docker and apptainer runs both providers at once, each within its own bound.

A spec's tasks come cell by cell (every docker task, then every apptainer one). A task waiting for its
busy provider must not hold one of the run's places meanwhile: when it did, the apptainer tasks
started only once the docker ones were nearly done, and a docker-versus-apptainer matrix took about
as long as the two run one after the other."""

from __future__ import annotations

import itertools
from datetime import datetime
from pathlib import Path

import pytest

from anyswe.experiment import Experiment

pytestmark = [pytest.mark.containers, pytest.mark.usefixtures("runtimes")]

REPO = Path(__file__).resolve().parents[2]
IDS = ["demo__calc-1", "demo__slug-2", "demo__settings-3"]

# bench/sleep_agent.py waits in its sandbox (a command through the exec path) and changes nothing: an
# empty patch, unresolved without a grading sandbox, so each task holds one sandbox for its wait.
SPEC = f"""\
name: two-providers
dataset: {{name: demo, instance_ids: [{", ".join(IDS)}]}}
agents:
  sleep: {{type: "bench.sleep_agent:SleepAgent", seconds: 4}}
providers:
  docker: {{type: docker, concurrency: 1}}
  apptainer: {{type: apptainer, concurrency: 1}}
matrix: {{agents: [sleep], providers: [docker, apptainer]}}
concurrency: 2
retries: {{max_attempts: 1}}
"""


def test_both_providers_run_at_once_each_within_its_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(REPO))  # `bench.sleep_agent` from the checkout
    (tmp_path / "spec.yaml").write_text(SPEC)
    exp = Experiment.load(tmp_path / "spec.yaml", run_dir=tmp_path / "run")
    summary = exp.run(progress=False)
    assert (summary.ran, summary.errors) == (6, 0), summary
    spans: dict[str, list[tuple[datetime, datetime]]] = {"docker": [], "apptainer": []}
    for row in exp.results().iter_rows(named=True):
        assert row["error_kind"] is None, row
        span = (datetime.fromisoformat(row["started_at"]), datetime.fromisoformat(row["finished_at"]))
        spans[row["provider"]].append(span)
    for provider, runs in spans.items():
        runs.sort()
        # Within its bound of one: each task of a provider began after the one before it had ended.
        assert all(b[0] >= a[1] for a, b in itertools.pairwise(runs)), (provider, runs)
    # Both at once from the start: the first apptainer task began before the first docker task ended
    # (rather than after the second, when the docker tasks had held both of the run's places).
    assert spans["apptainer"][0][0] < spans["docker"][0][1], spans
