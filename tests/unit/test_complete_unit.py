"""A unit of work carries everything its stages need, resolved when it is built: the harness's
workdir, the agent's submit command and gateway turn cap, the image reference, a replay model's
trajectory (or why there is none). The worker's objects are chosen by what a unit says, not its names."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from anyswe.agents import agent_class
from anyswe.execute.unit import make_unit
from anyswe.execute.worker import Worker
from anyswe.plan import make_plan
from anyswe.spec import load_spec

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "run_before_trajectory_contract"


def _unit(tmp_path: Path, text: str, n: int = 0):  # type: ignore[no-untyped-def]
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    plan = make_plan(load_spec(spec))
    return make_unit(plan, plan.tasks[n], run_id="r", attempt=1)


def test_the_stages_facts_are_in_the_unit(tmp_path: Path) -> None:
    unit = _unit(
        tmp_path,
        "name: s\ndataset: {name: demo, limit: 1}\nagents:\n  m: {type: mini-swe-agent}\n  o: {type: openclaw}\n"
        "models:\n  s: {api: scripted}\nproviders:\n  d: {type: docker, image: 'reg/x:{instance_id}'}\n",
    )
    assert unit.workdir == "/testbed" and unit.cell.agent == "m"
    assert unit.submit_command == agent_class("mini-swe-agent").submit_command is not None
    assert unit.gateway_turns is None and unit.replay is None
    # The provider's template, filled in for this instance: the node only reads it.
    assert unit.image.ref == f"reg/x:{unit.instance.instance_id}"
    openclaw = _unit(
        tmp_path,
        "name: s\ndataset: {name: demo, limit: 1}\nagents:\n  o: {type: openclaw, max_turns: 7}\n"
        "models:\n  s: {api: scripted}\nproviders:\n  d: {type: docker}\n",
    )
    # OpenClaw cannot cap its own turns: the gateway does, at its config's max_turns.
    assert openclaw.gateway_turns == 7 and openclaw.image.build_dataset == "demo" and openclaw.image.ref is None


def test_a_replay_source_is_chosen_when_the_unit_is_built(tmp_path: Path) -> None:
    text = (
        "name: s\ndataset: {name: demo, instance_ids: [demo__calc-1]}\nagents:\n  mini: {type: mini-swe-agent}\n"
        f"models:\n  again: {{api: scripted, replay: {{run: {FIXTURE}, model: scripted-responses}}}}\n"
        "providers:\n  d: {type: docker}\n"
    )
    unit = _unit(tmp_path, text)
    assert unit.replay is not None and unit.replay.error is None and unit.replay.trajectory is not None
    assert unit.replay.trajectory.is_file() and unit.replay.trajectory.is_relative_to(FIXTURE)
    # A run with nothing recorded for the task: that task's error, carried, not raised at build.
    missing = _unit(tmp_path, text.replace("model: scripted-responses", "model: never-recorded"))
    assert missing.replay is not None and missing.replay.trajectory is None
    assert "has no recorded calls of mini x never-recorded on demo__calc-1" in (missing.replay.error or "")


def test_the_worker_keys_agents_by_their_config_not_their_cell_name(tmp_path: Path) -> None:
    unit = _unit(
        tmp_path,
        "name: s\ndataset: {name: demo, limit: 1}\nagents:\n  m: {type: mini-swe-agent, step_limit: 5}\n"
        "models:\n  s: {api: scripted}\nproviders:\n  d: {type: docker}\n",
    )
    longer = dataclasses.replace(unit, agent=unit.agent.model_copy(update={"step_limit": 40}))
    worker = Worker()
    assert worker.agent(unit) is worker.agent(unit)
    assert worker.agent(longer).config.step_limit == 40 and worker.agent(unit).config.step_limit == 5


def test_rollouts_load_a_named_dataset_once(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A server's every request names its dataset: its rows are read once per session, not per request,
    and an inline row is never looked up in them."""
    import anyswe.datasets as datasets
    from anyswe.execute.rollout import Rollouts

    loads: list[str] = []
    real = datasets.load_dataset

    def counting(name, *args, **kwargs):  # type: ignore[no-untyped-def]
        loads.append(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(datasets, "load_dataset", counting)
    session = Rollouts()
    blocks = {"agent": {"type": "mini-swe-agent"}, "model": {"api": "scripted"}, "dataset": "demo"}
    units = [session.unit("demo__calc-1", **blocks, sample="next") for _ in range(3)]
    assert [u.sample for u in units] == [0, 1, 2] and loads == ["demo"]
    row = units[0].instance.model_dump()
    assert session.unit({**row, "instance_id": "demo__calc-99"}, **blocks).instance.instance_id == "demo__calc-99"
    assert loads == ["demo"]


def test_an_unreadable_replayed_run_fails_its_tasks_not_the_build(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.jsonl").write_text("{not json\n" + "{}\n")
    text = (
        "name: s\ndataset: {name: demo, instance_ids: [demo__calc-1]}\nagents:\n  mini: {type: mini-swe-agent}\n"
        f"models:\n  again: {{api: scripted, replay: {{run: {run}}}}}\nproviders:\n  d: {{type: docker}}\n"
    )
    unit = _unit(tmp_path, text)
    assert unit.replay is not None and unit.replay.trajectory is None
    assert "cannot be read" in (unit.replay.error or "")


def test_a_unit_whose_tools_cannot_be_built_is_its_own_internal_error(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import asyncio

    unit = _unit(
        tmp_path,
        "name: s\ndataset: {name: demo, limit: 1}\nagents:\n  g: {type: gold}\nproviders:\n  d: {type: docker}\n",
    )

    def broken(self, unit):  # type: ignore[no-untyped-def]
        raise RuntimeError("a plugin's constructor failed")

    monkeypatch.setattr(Worker, "tools", broken)
    result = asyncio.run(Worker().run(unit)).result
    assert result.error_kind == "internal" and "a plugin's constructor failed" in (result.error or "")
