"""The planner: matrix expansion, compatibility, stable task keys."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import ClassVar, Literal

import pytest
from typer.testing import CliRunner

from anyswe.agents import Agent, AgentConfig, AgentContext, AgentOutcome, register_agent
from anyswe.cli import app
from anyswe.errors import PlanError
from anyswe.plan import Cell, expand_cells, make_plan
from anyswe.spec import load_spec


class ModelAgentConfig(AgentConfig):
    type: Literal["needs-model"] = "needs-model"


class ModelAgent(Agent):
    """A stand-in for the model-driven agents to come: only its `needs_model` matters here."""

    name: ClassVar[str] = "needs-model"
    config_class = ModelAgentConfig

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        raise NotImplementedError


register_agent("needs-model", f"{__name__}:ModelAgent")

BASE = """\
name: p
dataset: {name: demo, limit: 3}
agents:
  gold: {type: gold}
  noop: {type: noop}
  coder: {type: needs-model}
models:
  m1: {api: openai-chat, model: a}
  m2: {api: anthropic-messages, model: b}
providers:
  d: {type: docker}
  a: {type: apptainer}
"""


def spec_from(tmp_path: Path, extra: str = "", base: str = BASE) -> Path:
    p = tmp_path / "s.yaml"
    p.write_text(base + extra)
    return p


def test_model_free_agents_take_no_model(tmp_path: Path) -> None:
    cells = expand_cells(load_spec(spec_from(tmp_path)))
    assert Cell("gold", None, "d") in cells and Cell("noop", None, "a") in cells
    assert not any(c.agent == "gold" and c.model for c in cells)
    assert {c for c in cells if c.agent == "coder"} == {Cell("coder", m, p) for m in ("m1", "m2") for p in ("d", "a")}
    assert len(cells) == 2 * 2 + 4


def test_include_and_exclude(tmp_path: Path) -> None:
    extra = """\
matrix:
  agents: [gold]
  providers: [d]
  include: [{agent: noop, provider: a}]
  exclude: [{provider: d, agent: gold}]
"""
    assert expand_cells(load_spec(spec_from(tmp_path, extra))) == [Cell("noop", None, "a")]


def test_incompatible_combination_says_why(tmp_path: Path) -> None:
    extra = "matrix:\n  include: [{agent: gold, model: m1, provider: d}]\n"
    with pytest.raises(PlanError, match="'gold' \\(gold\\) is model-free and cannot be combined with model 'm1'"):
        expand_cells(load_spec(spec_from(tmp_path, extra)))
    no_models = BASE.split("models:")[0] + "providers:\n  d: {type: docker}\n"
    with pytest.raises(PlanError, match="agent 'coder' \\(needs-model\\) needs a model, and none is declared"):
        expand_cells(load_spec(spec_from(tmp_path, base=no_models)))


def test_an_agent_that_cannot_speak_a_models_protocol_says_so_at_plan_time(tmp_path: Path) -> None:
    """OpenClaw has providers for the three built-in protocols only: a plugin protocol is refused when the
    plan is made (before, every task of the cell failed with a KeyError in its configure)."""
    from anyswe.gateway.protocols import PROTOCOLS, OpenAIChat, _instances

    class Lines(OpenAIChat):
        name: ClassVar[str] = "lines-test"
        paths: ClassVar[tuple[str, ...]] = ("/v1/lines",)

    PROTOCOLS.register(Lines.name, Lines)
    try:
        spec = (
            "name: p\ndataset: {name: demo, limit: 1}\nagents:\n  oc: {type: openclaw}\n"
            "models:\n  ok: {api: scripted}\n  odd: {api: scripted, protocol: lines-test}\n"
            "providers:\n  d: {type: docker}\n"
        )
        with pytest.raises(PlanError, match=r"agents\.oc with models\.odd: openclaw speaks .*'lines-test'"):
            make_plan(load_spec(spec_from(tmp_path, base=spec)))
        told = spec.replace("oc: {type: openclaw}", "oc: {type: openclaw, protocol: anthropic-messages}")
        assert len(make_plan(load_spec(spec_from(tmp_path, base=told))).tasks) == 2
    finally:
        PROTOCOLS._targets.pop(Lines.name, None)
        _instances.pop(Lines.name, None)


def test_tasks_and_keys(tmp_path: Path) -> None:
    plan = make_plan(load_spec(spec_from(tmp_path, "samples: 2\n")))
    assert len(plan.instances) == 3
    assert len(plan.tasks) == len(plan.cells) * 3 * 2
    keys = [t.key for t in plan.tasks]
    assert len(set(keys)) == len(keys)
    assert all(t.key.endswith("__" + t.instance_id) for t in plan.tasks)


def keys_of(path: Path, *overrides: str) -> list[str]:
    return [t.key for t in make_plan(load_spec(path, overrides)).tasks]


def test_keys_are_stable_and_ignore_what_cannot_change_results(tmp_path: Path) -> None:
    path = spec_from(tmp_path)
    first = keys_of(path)
    assert keys_of(path) == first
    # Where results go, how many run at once and startup limits do not change a result.
    assert (
        keys_of(
            path,
            "output_dir=/elsewhere",
            "concurrency=1",
            "providers.d.concurrency=9",
            "timeouts.sandbox_start=5",
            "providers.a.state_dir=/tmp/x",
        )
        == first
    )
    # What can change a result changes the key.
    assert keys_of(path, "timeouts.agent=5") != first
    assert keys_of(path, "providers.d.memory=1g")[0] != first[0]
    assert keys_of(path, "models.m1.params.temperature=0.5") != first
    # Keeping the policy's tokens, and masking by them, change what a row holds and decides.
    assert keys_of(path, "models.m1.mask_off_policy=true") != first


def test_keys_hash_file_contents_not_paths(tmp_path: Path) -> None:
    preds = tmp_path / "p1" / "preds.jsonl"
    preds.parent.mkdir()
    preds.write_text(json.dumps({"instance_id": "demo__calc-1", "model_patch": "x"}) + "\n")
    text = (
        "name: r\ndataset: {name: demo, limit: 1}\nagents:\n  r: {type: replay, predictions: PATH}\n"
        "providers:\n  d: {type: docker}\n"
    )
    a = spec_from(tmp_path, base=text.replace("PATH", str(preds)))
    moved = tmp_path / "p2" / "other.jsonl"
    moved.parent.mkdir()
    shutil.copy(preds, moved)
    b = tmp_path / "b.yaml"
    b.write_text(text.replace("PATH", str(moved)))
    assert keys_of(a) == keys_of(b)
    moved.write_text(json.dumps({"instance_id": "demo__calc-1", "model_patch": "y"}) + "\n")
    assert keys_of(a) != keys_of(b)


def test_filters(tmp_path: Path) -> None:
    path = spec_from(tmp_path)
    plan = make_plan(load_spec(path, ["dataset.limit=null", "dataset.instance_ids=[demo__leap-5, demo__calc-1]"]))
    assert sorted(i.instance_id for i in plan.instances) == ["demo__calc-1", "demo__leap-5"]
    seeded = [i.instance_id for i in make_plan(load_spec(path, ["dataset.seed=3"])).instances]
    assert seeded == [i.instance_id for i in make_plan(load_spec(path, ["dataset.seed=3"])).instances]
    with pytest.raises(Exception, match="not in the dataset: nope"):
        make_plan(load_spec(path, ["dataset.instance_ids=[nope]"]))


def test_plan_cli_table_and_json(tmp_path: Path) -> None:
    path = spec_from(tmp_path)
    runner = CliRunner()
    r = runner.invoke(app, ["plan", str(path), "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["instances"] == 3 and len(data["tasks"]) == sum(c["tasks"] for c in data["cells"])
    r = runner.invoke(app, ["plan", str(path)])
    assert r.exit_code == 0 and "coder.m1.d" in r.output
    r = runner.invoke(app, ["plan", str(path), "--set", "samples=0"])
    assert r.exit_code == 2 and "--set samples=0: samples" in r.output


def test_replay_predictions_are_checked_at_plan_time(tmp_path: Path) -> None:
    text = (
        "name: r\ndataset: {name: demo}\nagents:\n  r: {type: replay, predictions: PREDS}\n"
        "providers:\n  d: {type: docker}\n"
    )
    with pytest.raises(PlanError, match=r"agents\.r: replay: predictions file not found: .*nope\.jsonl"):
        make_plan(load_spec(spec_from(tmp_path, base=text.replace("PREDS", "nope.jsonl"))))
    (tmp_path / "bad.jsonl").write_text('{"instance_id": "demo__calc-1", "model_patch": "x"}\n{oops\n')
    with pytest.raises(PlanError, match=r"bad\.jsonl:2:2: not valid JSON"):
        make_plan(load_spec(spec_from(tmp_path, base=text.replace("PREDS", "bad.jsonl"))))
    (tmp_path / "rows.jsonl").write_text('{"instance_id": "demo__calc-1"}\n')
    with pytest.raises(PlanError, match="row 1 lacks instance_id or model_patch"):
        make_plan(load_spec(spec_from(tmp_path, base=text.replace("PREDS", "rows.jsonl"))))
    # A model_patch that is not a diff (a list) is this file's error, found before anything runs.
    (tmp_path / "list.jsonl").write_text('{"instance_id": "demo__calc-1", "model_patch": ["x"]}\n')
    with pytest.raises(PlanError, match=r"list\.jsonl: row 1: model_patch must be a string \(a diff\), not a list"):
        make_plan(load_spec(spec_from(tmp_path, base=text.replace("PREDS", "list.jsonl"))))
    (tmp_path / "latin1.jsonl").write_bytes(b'{"instance_id": "demo__calc-1", "model_patch": "caf\xe9"}\n')
    with pytest.raises(PlanError, match=r"latin1\.jsonl:1:52: not UTF-8 text \(byte 0xe9\)"):
        make_plan(load_spec(spec_from(tmp_path, base=text.replace("PREDS", "latin1.jsonl"))))
    # Predictions for instances the dataset does not have: another dataset's file, not silently ignored.
    (tmp_path / "other.jsonl").write_text('{"instance_id": "django__django-1", "model_patch": "x"}\n')
    with pytest.raises(PlanError, match=r"predicts 1 instance\(s\) the dataset does not have: django__django-1"):
        make_plan(load_spec(spec_from(tmp_path, base=text.replace("PREDS", "other.jsonl"))))


def test_the_verified_matrix_spec_plans_here(shared_swebench: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The matrix users run first, planned as its comment says (from the repository's root, the shared rows
    given as the shell sees them): every agent that takes a model x 2 models x 2 runtimes over all 500
    instances, plus gold/noop."""
    from anyswe.agents import AGENTS, agent_class

    repo = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(repo)
    rows = Path("..") / "shared" / "swebench" / "verified.jsonl"
    assert f"--set dataset.path={rows}" in (repo / "specs" / "verified_matrix.yaml").read_text()
    plan = make_plan(load_spec(Path("specs") / "verified_matrix.yaml", [f"dataset.path={rows}"]))
    cells = {(c.agent, c.model, c.provider) for c in plan.cells}
    types = {name: cfg.type for name, cfg in plan.spec.agents.items()}
    built_in = [n for n in AGENTS.names() if agent_class(n).__module__.startswith("anyswe.")]  # not a test's own
    model_agents = {n for n in built_in if agent_class(n).needs_model}
    assert {types[a] for a, m, _ in cells if m is not None} == model_agents  # every one users compare
    assert {(a, m, p) for a, m, p in cells if m is not None} == {
        (a, m, p) for a in types if types[a] in model_agents for m in ("gpt-5.5", "opus-4.8")
        for p in ("docker", "apptainer")
    }  # fmt: skip
    assert len(plan.instances) == 500 and len(plan.tasks) == (len(model_agents) * 4 + 4) * 500
    models = plan.spec.models
    assert all(m.params == {"temperature": 1.0, "top_p": 1.0} for m in models.values())
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    assert models["gpt-5.5"].endpoint_url() == "http://127.0.0.1:9/v1"  # read from the environment at run time


def test_an_id_leading_out_of_the_run_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    from anyswe.datasets import demo

    row = dict(next(r for r in demo.rows() if r["instance_id"] == "demo__calc-1"))
    escape = tmp_path / "escaped"
    row["instance_id"] = "demo__calc-1/../../../.." + str(escape)
    (tmp_path / "rows.jsonl").write_text(json.dumps(row) + "\n")
    base = (
        "name: esc\ndataset: {name: demo, path: rows.jsonl}\nagents:\n  gold: {type: gold}\n"
        "providers:\n  d: {type: docker}\n"
    )
    path = spec_from(tmp_path, base=base)
    r = CliRunner().invoke(app, ["apply", str(path), "--out", str(tmp_path / "out")])
    assert r.exit_code != 0
    assert "rows.jsonl: row 1: field 'instance_id'" in r.output and "not '/'" in r.output, r.output
    assert not escape.exists()
    assert {p.name for p in tmp_path.iterdir()} <= {"rows.jsonl", "s.yaml", "out"}
    assert not (tmp_path / "out" / "tasks").exists()


def test_a_result_neutral_agent_field_leaves_the_keys_as_they_were(tmp_path: Path) -> None:
    """mini-swe-agent's transcript cap (issue 31, item 7) cannot change a result: adding it kept the
    keys of tasks already run (the key below is the one from before the field existed), and setting it
    runs nothing again; a field that can change a result still changes the key."""
    base = BASE.replace("  coder: {type: needs-model}\n", "  mini: {type: mini-swe-agent}\n")
    path = spec_from(tmp_path, base=base.replace("limit: 3", "instance_ids: [demo__calc-1]"))
    same = ["matrix.agents=[mini]", "matrix.models=[m1]", "matrix.providers=[d]"]
    first = keys_of(path, *same)
    assert first == ["503f0ecffcf74999__demo__calc-1"]
    assert keys_of(path, *same, "agents.mini.transcript_bytes=100000") == first
    assert keys_of(path, *same, "agents.mini.step_limit=3") != first
