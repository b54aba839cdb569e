"""Plugins found through entry points, as an installer lays them out: a package's ``*.dist-info`` with
``entry_points.txt`` on the path (what `uv pip install` writes; tests/e2e/test_plugin_package.py installs
the real example package and runs it on both runtimes)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from anyswe.agents import Agent
from anyswe.datasets import load_dataset, registry
from anyswe.errors import DatasetError, SpecError
from anyswe.registry import Registry

PLUGIN = """
from typing import ClassVar
from anyswe.agents.noop import NoopAgent
from anyswe.datasets import Benchmark

class Quiet(NoopAgent):
    name: ClassVar[str] = "quiet"

class Tiny(Benchmark):
    name: ClassVar[str] = "tiny-bench"
    aliases: ClassVar[tuple[str, ...]] = ("tiny",)
    harness: ClassVar[str] = "pytest"

    def rows(self):
        return [{"instance_id": "t__one-1", "repo": "t/one", "base_commit": "abc", "test_patch": "",
                 "FAIL_TO_PASS": ["test_a.py::test_a"]}]

from anyswe.execute.runner import Runner

class Elsewhere(Runner):
    bounded_by_driver = False

    @classmethod
    def create(cls, *, address, local_resources, gateway_host):
        made = cls()
        made.address = address
        return made

    async def check(self, units): ...
    async def run(self, unit): raise NotImplementedError
    async def collect_orphans(self, task_keys): return []
    async def sweep(self, run_id): return []
    async def close(self): ...

class Misnamed(Tiny):
    name: ClassVar[str] = "something-else"
    aliases: ClassVar[tuple[str, ...]] = ()
"""

ENTRY_POINTS = """
[anyswe.agents]
quiet = fakeplug:Quiet
gold = fakeplug:Quiet
broken = fakeplug:NotThere

[anyswe.executors]
elsewhere = fakeplug:Elsewhere

[anyswe.benchmarks]
tiny-bench = fakeplug:Tiny
misnamed = fakeplug:Misnamed
awol = fakeplug:NotThere
"""


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    site = tmp_path / "site"
    info = site / "fakeplug-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fakeplug\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    (site / "fakeplug.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(site))
    registry.refresh()
    yield site
    monkeypatch.undo()
    sys.modules.pop("fakeplug", None)
    registry.refresh()


def _agents() -> Registry[Agent]:
    reg: Registry[Agent] = Registry("agent type", Agent, group="anyswe.agents")
    reg.register("gold", "anyswe.agents.gold:GoldAgent")
    return reg


def test_an_installed_plugin_is_found_by_name_and_listed(installed: Path) -> None:
    reg = _agents()
    assert reg.load("quiet").__name__ == "Quiet"
    assert "quiet" in reg
    assert reg.names()[0] == "gold" and "quiet" in reg.names()
    assert reg.builtin_names() == ["gold"]


def test_a_plugin_cannot_take_a_builtin_name(installed: Path) -> None:
    assert _agents().load("gold").__name__ == "GoldAgent"


def test_a_plugin_that_does_not_load_names_its_entry_point_and_package(installed: Path) -> None:
    with pytest.raises(SpecError) as err:
        _agents().load("broken")
    text = str(err.value)
    assert "'broken'" in text and "fakeplug:NotThere" in text and "anyswe.agents" in text and "fakeplug 1.0" in text


def test_without_the_package_the_name_is_unknown() -> None:
    with pytest.raises(SpecError, match="unknown agent type 'quiet'"):
        _agents().load("quiet")
    with pytest.raises(DatasetError, match="unknown dataset 'tiny-bench'"):
        registry.route("tiny-bench")


def test_a_plugin_benchmark_routes_by_name_and_alias_and_loads(installed: Path) -> None:
    assert registry.route("tiny-bench").name == "tiny-bench"
    assert registry.route("TINY:test").name == "tiny-bench"
    assert "tiny-bench" in registry.known_datasets()
    ds = load_dataset("tiny")
    assert ds.name == "tiny-bench" and ds.harness == "pytest" and [i.instance_id for i in ds.instances] == ["t__one-1"]
    # anyswe's own still route without loading a plugin
    assert registry.route("verified").name == "swe-bench-verified"


def test_a_plugin_that_does_not_load_breaks_no_other_name(installed: Path) -> None:
    assert registry.route("tiny").name == "tiny-bench"  # found past `awol` in the alias scan
    with pytest.raises(DatasetError) as err:
        registry.route("nothing-like-it")
    assert "awol (does not load)" in str(err.value) and "fakeplug:NotThere" in str(err.value)


def test_a_benchmark_registered_under_a_name_it_does_not_answer_to_is_refused(installed: Path) -> None:
    with pytest.raises(DatasetError, match="registered as Misnamed"):
        registry.route("misnamed")


def test_a_plugin_executor_is_chosen_by_name_and_an_unknown_one_is_refused_at_load(
    installed: Path, tmp_path: Path
) -> None:
    from anyswe.execute.runner import EXECUTORS, make_runner
    from anyswe.spec import load_spec

    EXECUTORS.refresh()
    runner = make_runner("elsewhere", "cluster:1")
    assert type(runner).__name__ == "Elsewhere" and runner.address == "cluster:1"  # type: ignore[attr-defined]
    assert not runner.bounded_by_driver
    spec = tmp_path / "s.yaml"
    body = "name: s\ndataset: {name: demo}\nagents: {g: {type: gold}}\nproviders: {d: {type: docker}}\n"
    spec.write_text(body + "executor: {type: elsewhere}\n")
    assert load_spec(spec).executor.type == "elsewhere"
    spec.write_text(body + "executor: {type: nowhere}\n")
    wrong = r"s.yaml:5:\d+: executor.type: .*unknown executor .nowhere.; known: local, ray"
    with pytest.raises(SpecError, match=wrong):
        load_spec(spec)
    EXECUTORS.refresh()


def test_an_agents_transcript_reader_is_its_own_class() -> None:
    """The trajectory reader asks each agent class for its transcript: a plugin agent's is found the
    same way as Claude Code's, with no table of anyswe's to edit."""
    from typing import ClassVar

    from anyswe.agents import AGENTS, Agent, AgentConfig, transcript_readers, transcript_tool_results

    class Chatty(Agent):
        name: ClassVar[str] = "chatty-test"
        config_class = AgentConfig
        transcript: ClassVar[str | None] = "agent-chatty.log"

        @classmethod
        def tool_results(cls, transcript: str) -> dict[str, tuple[str, bool]]:
            call, _, out = transcript.partition("=")
            return {call: (out, False)}

        async def run(self, ctx):  # type: ignore[no-untyped-def]
            raise NotImplementedError

    assert "agent-chatty.log" not in transcript_readers()  # read (and kept) before the agent was added
    AGENTS.register("chatty-test", Chatty)
    try:
        readers = transcript_readers()
        assert readers["agent-chatty.log"] is Chatty and readers["agent-claude-code.jsonl"].name == "claude-code"
        assert transcript_tool_results({"agent-chatty.log": "call_1=ok"}) == {"call_1": ("ok", False)}
    finally:
        AGENTS._targets.pop("chatty-test", None)
        AGENTS.refresh()
    assert "agent-chatty.log" not in transcript_readers()
