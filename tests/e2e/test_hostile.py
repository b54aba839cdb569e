"""A hostile agent cannot turn its own failure into a masked infra sample (a free re-roll), on either runtime.

Each agent below is one red-team step measured against an earlier anyswe, where each gave a masked
``SandboxLost`` or "patch capture failed" row, run again on every attempt: killing the sandbox's PID 1,
removing ``.git``, a clean filter that must run and fails, a patch whose conftest kills PID 1
(and every other process) in the grading sandbox when the tests fail, and a fork bomb left running
(every pid of the sandbox taken, so that no command of the capture could start). Now each is the agent's: one
row, unresolved, not masked, not retried. A kill from the host stays infra and is retried
(tests/e2e/test_faults.py, test_fault_suite.py).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import ClassVar, Literal

import pytest

from anyswe.agents import Agent, AgentConfig, AgentContext, AgentOutcome, register_agent
from anyswe.errors import SandboxPidsExhausted
from anyswe.experiment import Experiment
from anyswe.results.store import read_results

pytestmark = pytest.mark.containers

# In the grading sandbox, when the tests fail: kill PID 1 with everything, then every process.
CONFTEST = """\
import os, signal

def pytest_sessionfinish(session, exitstatus):
    if exitstatus != 0:
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGKILL):
            try:
                os.kill(1, sig)
            except OSError:
                pass
        os.kill(-1, signal.SIGKILL)
"""

STEPS = {
    "killer": ["kill -TERM 1; kill -HUP 1; kill -INT 1; kill -QUIT 1; kill -KILL 1; kill -STOP 1; sleep 1"],
    "nogit": ["rm -rf .git"],
    # A filter the repository's own config requires, whose clean command fails: `git add` dies with it.
    "filter": [
        "git config filter.x.clean false && git config filter.x.required true && "
        "echo '* filter=x' > .gitattributes && echo '* filter=x' >> .git/info/attributes",
        "git config core.fsmonitor /bin/false && mkdir -p /tmp/h && printf '#!/bin/sh\\nexit 1\\n' > /tmp/h/pre-commit "
        "&& chmod +x /tmp/h/pre-commit && git config core.hooksPath /tmp/h",
    ],
    "conftest": [f"cat > conftest.py <<'EOF'\n{CONFTEST}EOF"],
    # A fork bomb in a session of its own, left running to fill the sandbox's pids when the agent ends.
    "forkbomb": ["setsid bash -c 'bomb() { bomb | bomb & }; bomb' >/dev/null 2>&1 </dev/null & sleep 4"],
}


class HostileConfig(AgentConfig):
    type: Literal["hostile"] = "hostile"
    steps: str = "killer"
    fix: bool = False


class HostileAgent(Agent):
    """Runs one red-team step (``steps``), after writing the reference fix when ``fix``."""

    name: ClassVar[str] = "hostile"
    config_class = HostileConfig
    config: HostileConfig
    needs_model = False
    needs_reference = True

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        assert ctx.reference_patch is not None
        steps = STEPS[self.config.steps]
        if self.config.fix:
            await ctx.sandbox.write_file("/tmp/fix.diff", ctx.reference_patch.encode())
            steps = ["git apply /tmp/fix.diff && rm /tmp/fix.diff", *steps]
        for step in steps:
            r = await ctx.sandbox.exec(["bash", "-c", step], workdir=ctx.workdir, timeout=60)
            ctx.log(f"$ {step}\n(exit {r.exit_code}) {r.stderr}")
        try:
            alive = await ctx.sandbox.exec(["cat", "/proc/1/cmdline"])
            ctx.log(f"PID 1 after: {alive.stdout!r}")
        except SandboxPidsExhausted as exc:  # the fork bomb's sandbox may start nothing
            ctx.log(f"PID 1 after: unknown ({exc})")
        return AgentOutcome()


register_agent("hostile", f"{__name__}:HostileAgent")


@pytest.mark.exclusive  # two fork bombs take every CPU of the host (tests/containers/test_limits.py)
def test_a_hostile_agents_failure_stays_its_own_on_both_runtimes(runtimes: None, tmp_path: Path) -> None:
    agents = {
        "killer": "{type: hostile, steps: killer}",
        "nogit": "{type: hostile, steps: nogit, fix: true}",
        "filter": "{type: hostile, steps: filter}",
        "filterfix": "{type: hostile, steps: filter, fix: true}",
        "conftest": "{type: hostile, steps: conftest}",
        "forkbomb": "{type: hostile, steps: forkbomb, fix: true}",
    }
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "name: hostile\ndataset: {name: demo-swebench, instance_ids: [demo__inventory-4]}\n"
        "agents:\n" + "".join(f"  {name}: {block}\n" for name, block in agents.items()) + "providers:\n"
        "  docker: {type: docker}\n  apptainer: {type: apptainer, overlay_size_mb: 256}\n"
        "retries: {max_attempts: 3, backoff: 0.1}\n"
    )
    exp = Experiment.load(spec, run_dir=tmp_path / "run")
    exp.run(progress=False)
    attempts = read_results(exp.run_dir / "results.jsonl")
    assert len(attempts) == 12, attempts  # one row each: nothing was retried
    rows = {(r["agent"], r["provider"]): r for r in exp.results().iter_rows(named=True)}
    assert len(rows) == 12
    for (agent, provider), row in rows.items():
        log = (exp.run_dir / "tasks" / row["key"] / "agent.log").read_text()
        what = f"{agent} on {provider}: {row}\n{log}"
        assert row["attempt"] == 1 and not row["mask_sample"] and row["error_kind"] in (None, "agent"), what
        if agent == "forkbomb":
            # Ended from the host when the agent was done, the bomb cost the capture nothing.
            ended = re.search(r"ended (\d+) process\(es\) the agent left running", log)
            assert ended and int(ended[1]) >= 1000 and row["resolved"] and row["error_kind"] is None, what
            continue
        # The sandbox's PID 1 is anyswe's, and it outlived the agent's kills.
        assert "PID 1 after: '/" in log and ("anyswe-exec" in log or "/sbin/init" in log), what
        if agent == "filterfix":
            # The agent's real change, through its filter, fsmonitor and hooks: the fix, and it resolves.
            assert row["resolved"] and row["error_kind"] is None, what
            assert "diff --git a/inventory.py b/inventory.py" in row["model_patch"], what
            assert "diff --git a/.gitattributes b/.gitattributes" in row["model_patch"], what
        else:
            assert not row["resolved"], what
    for provider in ("docker", "apptainer"):
        nogit = rows[("nogit", provider)]
        assert nogit["error_kind"] == "agent" and "PatchCaptureFailed" in nogit["error"], nogit
        assert "not a git repository" in nogit["error"], nogit
        # The failing filter without the fix: no patch but the .gitattributes, unresolved and counted.
        flt = rows[("filter", provider)]
        assert flt["error_kind"] is None and flt["model_patch"].startswith("diff --git a/.gitattributes"), flt
        # The conftest ran in the grading sandbox, killed all it could, and the tests still count as failed.
        conftest = rows[("conftest", provider)]
        assert conftest["error_kind"] is None and conftest["patch_applied"], conftest
        output = (exp.run_dir / "tasks" / conftest["key"] / "test_output.txt").read_text()
        assert "ended from inside the sandbox" in output, output[-2000:]
        # Its verdict is unchanged by it, and the row says what the patch did (reward-hacking flags).
        assert conftest["flags"] == ["conftest"] and rows[("filterfix", provider)]["flags"] == [], conftest
        assert rows[("killer", provider)]["error_kind"] is None
