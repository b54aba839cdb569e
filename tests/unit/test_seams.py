"""The seams, without containers: one registry, provider configs honoured, units built from a plan."""

from __future__ import annotations

from pathlib import Path

import pytest

from anyswe.agents import AGENTS, Agent
from anyswe.errors import DatasetError, SpecError
from anyswe.execute.unit import make_unit
from anyswe.grading import HARNESSES, get_harness
from anyswe.grading.pytest import PytestHarness
from anyswe.plan import make_plan
from anyswe.registry import Registry
from anyswe.sandbox import PROVIDERS, ProviderConfig, provider_class
from anyswe.sandbox.apptainer import ApptainerConfig
from anyswe.sandbox.docker import DockerProvider
from anyswe.spec import load_spec

SPEC = """\
name: s
dataset: {name: demo, limit: 2}
agents:
  gold: {type: gold}
providers:
  d: {type: docker}
  a: {type: apptainer, sif: "/sifs/{instance_id}.sif"}
timeouts: {sandbox_start: 99}
"""


def spec_path(tmp_path: Path, text: str = SPEC) -> Path:
    p = tmp_path / "spec.yaml"
    p.write_text(text)
    return p


def test_one_registry_for_every_kind() -> None:
    for registry, name in ((AGENTS, "gold"), (PROVIDERS, "docker"), (HARNESSES, "pytest")):
        assert name in registry.names()
    assert provider_class("docker") is DockerProvider
    # A dotted path works without registration, with either separator.
    assert provider_class("anyswe.sandbox.docker:DockerProvider") is DockerProvider
    assert provider_class("anyswe.sandbox.docker.DockerProvider") is DockerProvider
    assert type(get_harness("anyswe.grading.pytest:PytestHarness")) is PytestHarness
    with pytest.raises(SpecError, match="not a subclass of SandboxProvider"):
        provider_class("anyswe.grading.pytest:PytestHarness")
    with pytest.raises(SpecError, match="cannot import 'nowhere_at_all'"):
        provider_class("nowhere_at_all:Thing")
    with pytest.raises(SpecError, match="has no 'Nope'"):
        provider_class("anyswe.sandbox.docker:Nope")
    with pytest.raises(SpecError, match="unknown sandbox provider 'podman'; known: docker, apptainer"):
        provider_class("podman")
    with pytest.raises(DatasetError, match="unknown grading harness"):
        get_harness("nope")
    reg: Registry[Agent] = Registry("thing", Agent)
    reg.register("gold", "anyswe.agents.gold:GoldAgent")
    assert reg.load("gold").name == "gold"


def test_provider_blocks_are_validated_by_their_own_class(tmp_path: Path) -> None:
    spec = load_spec(spec_path(tmp_path))
    assert isinstance(spec.providers["a"], ApptainerConfig) and spec.providers["a"].sif == "/sifs/{instance_id}.sif"
    bad = SPEC.replace("{type: docker}", "{type: docker, sif: x.sif}")
    with pytest.raises(SpecError, match=r"spec\.yaml:6:\d+: providers\.d\.sif: unknown key"):
        load_spec(spec_path(tmp_path, bad))


def test_a_field_the_user_sets_is_honoured(tmp_path: Path) -> None:
    """timeouts.sandbox_start fills a provider's startup timeout only where the user set none."""
    plan = make_plan(load_spec(spec_path(tmp_path), ["providers.d.startup_timeout=7"]))
    units = {u.cell.provider: u for u in (make_unit(plan, t, run_id="r", attempt=1) for t in plan.tasks)}
    assert units["d"].provider.startup_timeout == 7
    assert units["a"].provider.startup_timeout == 99
    # The spec's own objects are left as the user wrote them.
    assert "startup_timeout" not in plan.spec.providers["a"].model_fields_set


def test_result_neutral_fields_are_declared_on_the_fields() -> None:
    neutral = {
        name
        for name, f in ApptainerConfig.model_fields.items()
        if (f.json_schema_extra or {}).get("result_neutral")  # type: ignore[union-attr]
    }
    assert neutral == {
        "concurrency",
        "start_concurrency",
        "startup_timeout",
        "binary",
        "state_dir",
        "extra_options",
        "sif",
    }
    payload = ApptainerConfig(overlay_size_mb=512).key_payload()
    assert payload == {
        "type": "apptainer",
        "image": None,
        "overlay_size_mb": 512,
        "network": "none",
        "memory": "8g",
        "pids_limit": 4096,
    }
    assert "concurrency" not in ProviderConfig(type="x").key_payload()


def test_units_carry_everything_and_no_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_KEY", "sk-secret-value")
    text = SPEC + "models:\n  m: {api: openai-chat, model: x, api_key_env: MY_KEY}\n"
    plan = make_plan(load_spec(spec_path(tmp_path, text)))
    unit = make_unit(plan, plan.tasks[0], run_id="r", attempt=3)
    assert (unit.attempt, unit.run_id, unit.harness, unit.agent.type) == (3, "r", "pytest", "gold")
    assert unit.instance.instance_id == plan.tasks[0].instance_id and unit.image.build_dataset == "demo"
    assert "sk-secret-value" not in repr(unit)


def test_a_real_model_gets_an_http_upstream_and_the_key_stays_in_the_driver(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    from anyswe.execute.models import grant
    from anyswe.execute.session import serving_gateway
    from anyswe.gateway.upstream import HttpUpstream

    monkeypatch.setenv("OPENAI_API_KEY", "sk-never-in-a-unit")
    text = SPEC.replace("gold: {type: gold}", "mini: {type: mini-swe-agent}")
    text += "models:\n  gpt: {api: openai-chat, model: gpt-x, base_url: 'http://127.0.0.1:9/v1', "
    text += "api_key_env: OPENAI_API_KEY}\n"
    plan = make_plan(load_spec(spec_path(tmp_path, text)))
    units = [make_unit(plan, t, run_id="r", attempt=1) for t in plan.tasks]

    async def granted() -> tuple[str, object, str]:
        async with serving_gateway() as gateway:
            assert gateway is not None
            unit, token = await grant(gateway, units[0], tmp_path / "task")
            assert unit.endpoint is not None and token is not None and unit.endpoint.socket is not None
            # The task's own socket, in a directory of its own (what its sandbox mounts), gone when revoked.
            own = Path(unit.endpoint.socket)
            assert own.is_socket() and own.parent != gateway.socket.parent  # type: ignore[union-attr]
            used = gateway.revoke(token)
            assert not own.exists() and not own.parent.exists()
            return unit.endpoint.token or "", used.upstream, repr(unit)

    token, upstream, unit_repr = asyncio.run(granted())
    assert isinstance(upstream, HttpUpstream) and token.startswith("anyswe-")
    assert "sk-never-in-a-unit" not in unit_repr + token


def test_units_that_run_elsewhere_get_only_the_gateways_relay_address(tmp_path: Path) -> None:
    """With a relay host (Ray across hosts) the gateway listens there too, and a unit's endpoint names
    only that address: this machine's socket and loopback URL would mean nothing on another node."""
    import asyncio
    import urllib.request

    from anyswe.execute.models import grant
    from anyswe.execute.session import serving_gateway

    text = SPEC.replace("gold: {type: gold}", "mini: {type: mini-swe-agent}")
    text += "models:\n  s: {api: scripted}\n"
    plan = make_plan(load_spec(spec_path(tmp_path, text)))
    units = [make_unit(plan, t, run_id="r", attempt=1) for t in plan.tasks]

    async def granted(relay_host: str | None) -> tuple[object, int]:
        async with serving_gateway(relay_host) as gateway:
            assert gateway is not None
            unit, _ = await grant(gateway, units[0], tmp_path / "task")
            endpoint = unit.endpoint
            assert endpoint is not None
            status = 0
            if endpoint.relay is not None:
                url = f"http://{endpoint.relay}/v1/models"
                request = urllib.request.Request(url, headers={"Authorization": f"Bearer {endpoint.token}"})
                status = (await asyncio.to_thread(urllib.request.urlopen, request, timeout=30)).status
            return endpoint, status

    here, _ = asyncio.run(granted(None))
    assert here.relay is None and here.socket and here.base_url  # type: ignore[attr-defined]
    away, status = asyncio.run(granted("localhost"))
    assert (away.socket, away.base_url) == (None, None) and str(away.relay).startswith("127.0.0.1:")  # type: ignore[attr-defined]
    assert status == 200  # the gateway answers at the relay address (loopback names: its loopback port)

    # A fixed port (executor.gateway_port, for a firewall) is the one used; a taken one is a clear error.
    import socket

    from anyswe.errors import RuntimeNotAvailable

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        async def on_port() -> str:
            async with serving_gateway("127.0.0.1", port) as gateway:
                assert gateway is not None
                return str((await grant(gateway, units[0], tmp_path / "task"))[0].endpoint.relay)  # type: ignore[union-attr]

        with pytest.raises(
            RuntimeNotAvailable, match=r"cannot listen on 127\.0\.0\.1, port \d+ \(executor\.gateway_host"
        ):
            asyncio.run(on_port())
    assert asyncio.run(on_port()) == f"127.0.0.1:{port}"  # free again: used as given


def test_a_unit_whose_node_cannot_reach_the_gateway_is_an_infra_error(tmp_path: Path) -> None:
    """Not an agent failure: the relay cannot connect, so the task never starts and is run again."""
    import asyncio
    import dataclasses

    from anyswe.execute.worker import Worker
    from anyswe.model import ModelEndpoint

    text = SPEC.replace("gold: {type: gold}", "mini: {type: mini-swe-agent}") + "models:\n  s: {api: scripted}\n"
    plan = make_plan(load_spec(spec_path(tmp_path, text)))
    unit = make_unit(plan, plan.tasks[0], run_id="r", attempt=1)
    endpoint = ModelEndpoint(name="s", api="openai-chat", model="scripted", token="t", relay="127.0.0.2:1")
    output = asyncio.run(Worker().run(dataclasses.replace(unit, endpoint=endpoint)))
    assert output.result.error_kind == "infra" and not output.result.resolved
    assert "cannot reach the model gateway at 127.0.0.2:1" in str(output.result.error)


def test_a_lost_attempts_calls_are_kept_apart_from_the_next_attempts(tmp_path: Path) -> None:
    """The retry rewrites trajectory.jsonl; the infra row of the attempt before points at its own copy."""
    from anyswe.execute.classify import failed_output
    from anyswe.execute.models import TRAJECTORY, settle
    from anyswe.gateway import Grant, ScriptedModel

    text = SPEC.replace("gold: {type: gold}", "mini: {type: mini-swe-agent}") + "models:\n  s: {api: scripted}\n"
    plan = make_plan(load_spec(spec_path(tmp_path, text)))
    unit = make_unit(plan, plan.tasks[0], run_id="r", attempt=2)
    task_dir = tmp_path / "tasks" / unit.key
    task_dir.mkdir(parents=True)
    (task_dir / TRAJECTORY).write_text('{"call": 1}\n')
    used = Grant(unit.key, "s", ScriptedModel([]), calls=1)
    lost = settle(failed_output(unit, "infra", "the node died"), used, task_dir).result
    assert lost.trajectory_path == f"tasks/{unit.key}/trajectory.attempt-2.jsonl" and lost.model_calls == 1
    assert (tmp_path / lost.trajectory_path).read_text() == '{"call": 1}\n' and not (task_dir / TRAJECTORY).exists()
    (task_dir / TRAJECTORY).write_text('{"call": 1}\n')
    done = settle(failed_output(unit, "agent", "gave up"), used, task_dir).result
    assert done.trajectory_path == f"tasks/{unit.key}/{TRAJECTORY}"  # a verdict's own calls keep the usual name
