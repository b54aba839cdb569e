"""Spec loading: every error names file, line, column and field; overrides; relative paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from anyswe.errors import SpecError
from anyswe.spec import load_spec

GOOD = """\
name: t
dataset:
  name: demo
  limit: 2
agents:
  gold: {type: gold}
  replay:
    type: replay
    predictions: preds.jsonl
providers:
  docker:
    type: docker
    memory: 2g
"""


def write(tmp_path: Path, text: str, name: str = "spec.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_good_spec_and_defaults(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, GOOD))
    assert spec.name == "t" and spec.dataset.limit == 2 and spec.samples == 1
    assert spec.providers["docker"].type == "docker" and spec.providers["docker"].memory == "2g"
    # Paths in a spec are relative to the spec file, wherever anyswe runs.
    assert spec.agents["replay"].predictions == tmp_path / "preds.jsonl"  # type: ignore[attr-defined]
    assert spec.run_dir() == Path("runs/t")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (GOOD.replace("memory: 2g", "memroy: 2g"), ":13:5: providers.docker.memroy: unknown key"),
        (GOOD.replace("limit: 2", "limit: zero"), ":4:3: dataset.limit: Input should be a valid integer"),
        (GOOD.replace("limit: 2", "limit: 0"), ":4:3: dataset.limit: Input should be greater than or equal to 1"),
        (GOOD.replace("{type: gold}", "{type: gold, extra: 1}"), ":6:22: agents.gold.extra: unknown key"),
        (GOOD.replace("{type: gold}", "{type: golden}"), ":6:10: agents.gold.type: unknown agent type 'golden'"),
        (
            GOOD.replace("type: docker", "type: podman"),
            ":12:5: providers.docker.type: unknown sandbox provider 'podman'",
        ),
        (GOOD + "samples: -1\n", ":14:1: samples: Input should be greater than or equal to 1"),
        (GOOD + "matrix:\n  agents: [nope]\n", ":15:12: matrix.agents.0: matrix.agents names 'nope', which is not"),
        (GOOD + "matrix:\n  agents: []\n", ":15:3: matrix.agents: List should have at least 1 item"),
        (GOOD.replace("name: t\n", ""), ":1:1: name: Field required"),
        (
            GOOD + "models:\n  m:\n    api: openai-chat\n    model: x\n    api_key_env: sk-abc123\n",
            ":18:5: models.m.api_key_env: Value error, must be the NAME of an environment variable",
        ),
        (
            GOOD + "models:\n  m:\n    api: anthropic-messages\n    model: x\n    token_ids: true\n",
            ":15:3: models.m: Value error, token_ids: the policy's token ids come from an OpenAI-compatible",
        ),
        (
            GOOD + "executor:\n  type: ray\n  gateway_host: 0.0.0.0\n",
            ":16:3: executor.gateway_host: Value error, must be an address the nodes can connect to",
        ),
        (
            GOOD + "executor:\n  type: ray\n  gateway_host: '10.0.0.5:8080'\n",
            ":16:3: executor.gateway_host: Value error, must be an address or host name without a port",
        ),
    ],
)
def test_errors_name_file_line_column_and_field(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert str(path) in str(info.value)
    assert expected in str(info.value)


def test_all_errors_reported_at_once(tmp_path: Path) -> None:
    text = GOOD.replace("memory: 2g", "memroy: 2g").replace("{type: gold}", "{type: gold, bad: 1}")
    with pytest.raises(SpecError) as info:
        load_spec(write(tmp_path, text))
    assert "providers.docker.memroy" in str(info.value) and "agents.gold.bad" in str(info.value)


def test_every_undeclared_matrix_name_at_its_own_line(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD + "matrix:\n  agents: [gold, nope]\n  providers:\n    - docker\n    - podman\n")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    lines = str(info.value).splitlines()
    assert [line.split(": ", 1)[0].removeprefix(str(path)) for line in lines] == [":15:18", ":18:7"], lines


def test_a_byte_that_is_not_utf8_is_located(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_bytes(GOOD.encode() + b"description: caf\xe9\n")
    with pytest.raises(SpecError, match=r"spec\.yaml:14:17: not UTF-8 text \(byte 0xe9\)"):
        load_spec(path)


def test_invalid_yaml_points_at_line(tmp_path: Path) -> None:
    path = write(tmp_path, "name: t\ndataset: [unclosed\nagents: {}\n")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert f"{path}:3:" in str(info.value)


def test_missing_file_is_clear(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="spec file not found"):
        load_spec(tmp_path / "nope.yaml")


def test_set_overrides_any_field(tmp_path: Path) -> None:
    spec = load_spec(
        write(tmp_path, GOOD),
        [
            "samples=3",
            "dataset.limit=5",
            "providers.docker.concurrency=7",
            "dataset.instance_ids=[a, b]",
            "timeouts.agent=12.5",
        ],
    )
    assert spec.samples == 3 and spec.dataset.limit == 5 and spec.providers["docker"].concurrency == 7
    assert spec.dataset.instance_ids == ["a", "b"] and spec.timeouts.agent == 12.5


def test_set_errors_name_the_override(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as info:
        load_spec(write(tmp_path, GOOD), ["samples=many"])
    assert "--set samples=many: samples: Input should be a valid integer" in str(info.value)
    with pytest.raises(SpecError, match=r"expected KEY\.PATH=VALUE"):
        load_spec(write(tmp_path, GOOD), ["samples"])
    with pytest.raises(SpecError, match="unknown key"):
        load_spec(write(tmp_path, GOOD), ["providers.docker.nonsense=1"])


def test_demo_spec_in_repo_is_valid() -> None:
    spec = load_spec(Path(__file__).resolve().parents[2] / "specs" / "demo.yaml")
    assert set(spec.providers) == {"docker", "apptainer"} and set(spec.agents) == {"gold", "noop"}


@pytest.mark.parametrize("bad", [".x:Y", "a..b:C", "anyswe:No Such", "json:loads"])
def test_a_bad_dotted_type_is_an_error_at_its_field(tmp_path: Path, bad: str) -> None:
    text = f"name: t\ndataset: {{name: demo}}\nagents:\n  x: {{type: '{bad}'}}\nproviders:\n  d: {{type: '{bad}'}}\n"
    with pytest.raises(SpecError) as info:
        load_spec(write(tmp_path, text))
    message = str(info.value)
    assert f"spec.yaml:4:7: agents.x.type: agent type {bad!r}" in message, message
    assert f"spec.yaml:6:7: providers.d.type: sandbox provider {bad!r}" in message, message
    assert "Traceback" not in message


def test_a_bad_dotted_harness_is_an_error_at_its_field(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"spec\.yaml:\d+:\d+: grading\.harness: .*grading harness '\.x:Y': expected"):
        load_spec(write(tmp_path, GOOD + "grading: {harness: .x:Y}\n"))
    assert load_spec(write(tmp_path, GOOD + "grading: {harness: auto}\n")).grading.harness == "auto"


def laughs(levels: int, width: int = 10) -> str:
    lines = ['      l0: &l0 "lol"']
    for n in range(1, levels):
        lines.append(f"      l{n}: &l{n} [{', '.join([f'*l{n - 1}'] * width)}]")
    return "\n".join(lines) + "\n"


def test_a_billion_laughs_under_model_params_is_refused_at_once_where_it_grows(tmp_path: Path) -> None:
    import time

    text = GOOD + "models:\n  m:\n    api: openai-chat\n    model: x\n    params:\n" + laughs(10)
    t0 = time.monotonic()
    with pytest.raises(SpecError) as info:
        load_spec(write(tmp_path, text))
    assert time.monotonic() - t0 < 5
    # l5 holds 222221 values expanded: the first node over the bound, at its own line (its anchor).
    line = text.splitlines().index("      l5: &l5 [" + ", ".join(["*l4"] * 10) + "]") + 1
    assert str(info.value) == (
        f"{tmp_path / 'spec.yaml'}:{line}:{len('      l5: &')}: models.m.params.l5: "
        "with its aliases expanded it holds more than 200000 values"
    )
    # `plan` hashed the expanded params into every task key (it hung): now it stops at the spec.
    from typer.testing import CliRunner

    from anyswe.cli import app

    t0 = time.monotonic()
    r = CliRunner().invoke(app, ["plan", str(tmp_path / "spec.yaml")])
    assert r.exit_code == 2 and "models.m.params.l5: with its aliases expanded" in r.output, r.output
    assert time.monotonic() - t0 < 5


def test_a_few_aliases_and_a_recursive_one(tmp_path: Path) -> None:
    text = GOOD + "models:\n  m:\n    api: openai-chat\n    model: x\n    params:\n" + laughs(3)
    assert load_spec(write(tmp_path, text)).models["m"].params["l2"][0] == ["lol"] * 10
    # ruamel.yaml reads a recursive alias as null; a recursive structure is still refused, not walked forever.
    from anyswe._yaml import _Bound

    loop: list[object] = [1]
    loop.append(loop)
    with pytest.raises(SpecError, match=r"s\.yaml: params\.1: an alias refers to a node that holds it"):
        _Bound(Path("s.yaml")).size({"params": loop}, ())


def test_a_path_given_with_set_is_the_users_from_where_anyswe_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A spec's own relative paths are from its folder; one typed on the command line is from the shell's."""
    from anyswe.spec import load_spec

    specs, work = tmp_path / "specs", tmp_path / "work"
    specs.mkdir()
    work.mkdir()
    body = "name: s\ndataset: {name: demo, exclude_file: excl.yaml}\nagents: {g: {type: gold}}\n"
    (specs / "s.yaml").write_text(body + "providers: {d: {type: docker}}\n")
    monkeypatch.chdir(work)
    spec = load_spec(specs / "s.yaml", ["dataset.path=rows.jsonl"])
    assert spec.dataset.path == work / "rows.jsonl" and spec.dataset.exclude_file == specs / "excl.yaml"
    spec = load_spec(specs / "s.yaml", ["dataset={name: demo, path: sub/rows.jsonl, assets: /abs/assets}"])
    assert spec.dataset.path == work / "sub" / "rows.jsonl" and str(spec.dataset.assets) == "/abs/assets"
