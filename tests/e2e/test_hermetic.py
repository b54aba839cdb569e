"""What an agent can reach: no gold patch, no test patch, no future history, no host secrets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar, Literal

import polars as pl
import pytest

from anyswe.agents import Agent, AgentConfig, AgentContext, AgentOutcome, register_agent
from anyswe.datasets import load_dataset
from anyswe.experiment import Experiment

pytestmark = pytest.mark.containers

ROOTS = "/testbed /tmp /root /home /opt /srv /var /etc /usr/lib/python3"


class ProbeConfig(AgentConfig):
    type: Literal["probe"] = "probe"


class ProbeAgent(Agent):
    """Looks everywhere it can for the answers, and logs what it found."""

    name: ClassVar[str] = "probe"
    config_class = ProbeConfig
    needs_model = False

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        sb = ctx.sandbox
        commits = (await sb.exec(["git", "log", "--all", "--format=%H"], workdir=ctx.workdir)).stdout.split()
        # The first needle is in the base repo: it proves the search can find things.
        needles = [
            "class Inventory",
            "test_remove_too_many_raises",
            "test_stock_never_negative",
            "in stock",
            "FAIL_TO_PASS",
        ]
        found = {}
        for needle in needles:
            r = await sb.exec(f"grep -rIl --exclude-dir=proc --exclude-dir=sys -e {needle!r} {ROOTS} 2>/dev/null")
            found[needle] = r.stdout.split()
        env = (await sb.exec("env")).stdout
        # Objects the base commit does not reach (a fixed file, a test file stored while deriving patches).
        fsck = await sb.exec(["git", "fsck", "--unreachable", "--lost-found", "--no-reflogs"], workdir=ctx.workdir)
        objects = await sb.exec(["git", "cat-file", "--batch-all-objects", "--batch-check"], workdir=ctx.workdir)
        reachable = await sb.exec(["git", "rev-list", "--objects", "--all"], workdir=ctx.workdir)
        ctx.log(
            json.dumps(
                {
                    "commits": commits,
                    "found": found,
                    "env": env,
                    "fsck": fsck.stdout + fsck.stderr,
                    "objects": len(objects.stdout.splitlines()),
                    "reachable": len(reachable.stdout.splitlines()),
                }
            )
        )
        return AgentOutcome()


register_agent("probe", f"{__name__}:ProbeAgent")


def test_agent_cannot_reach_answers_or_secrets(runtimes: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-host-secret-never-inside")
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "name: hermetic\ndataset: {name: demo, instance_ids: [demo__inventory-4]}\n"
        "agents:\n  p: {type: probe}\n"
        "providers:\n  docker: {type: docker}\n  apptainer: {type: apptainer, overlay_size_mb: 256}\n"
    )
    exp = Experiment.load(spec, run_dir=tmp_path / "run")
    exp.run(progress=False)
    rows = exp.results()
    assert rows.height == 2 and rows["error_kind"].is_null().all()
    base = load_dataset("demo").by_id()["demo__inventory-4"].base_commit
    for key in rows.filter(pl.col("agent") == "p")["key"]:
        probe = json.loads((exp.run_dir / "tasks" / key / "agent.log").read_text().strip().splitlines()[-1])
        assert probe["commits"] == [base]  # no future history
        found = probe["found"]
        assert found.pop("class Inventory") == ["/testbed/inventory.py"]
        assert found == {n: [] for n in found}, found
        assert "sk-host-secret" not in probe["env"]
        assert "unreachable" not in probe["fsck"] and "dangling" not in probe["fsck"], probe["fsck"]
        assert probe["objects"] == probe["reachable"] > 0  # every stored object belongs to the base commit
