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

import json
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

# Root inside attaches PID 1 with ptrace and lets it go on with SIGKILL (issue 31): what it gets is printed.
PTRACE = """\
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
print("oom_score_adj of PID 1 at the start:", open("/proc/1/oom_score_adj").read().strip())
attached = libc.ptrace(16, 1, None, None)  # PTRACE_ATTACH
print("ptrace attach", attached, os.strerror(ctypes.get_errno()))
if attached == 0:
    import time; time.sleep(0.5)
    print("ptrace cont", libc.ptrace(7, 1, None, 9))  # PTRACE_CONT, SIGKILL
"""

# PID 1 made the OOM killer's first choice, then the sandbox's memory limit used up by processes each
# far smaller than PID 1's raised score (12 x 40 MiB in 256 MiB): PID 1 is the victim.
OOM = (
    'echo 1000 > /proc/1/oom_score_adj; echo "oom_score_adj of PID 1: $(cat /proc/1/oom_score_adj)"; '
    "for i in $(seq 12); do python3 -c 'import time; b = b\"x\" * (40 << 20); time.sleep(60)' & done; wait"
)

# Writes 3 GB into the sandbox's own file system, 50 MB at a time: past a disk limit of 300 MB.
DISKFILL = (
    "for i in $(seq 60); do dd if=/dev/zero of=/tmp/fill-$i bs=1M count=50 status=none || break; sleep 0.2; done; "
    "du -sm /tmp; sleep 3"
)

# The same two steps from a patch's conftest.py, in the grading sandbox, when the tests fail.
CONFTEST_PTRACE = f"""\
import subprocess, sys

def pytest_sessionfinish(session, exitstatus):
    if exitstatus != 0:
        out = subprocess.run([sys.executable, "-c", {PTRACE!r}], capture_output=True, text=True).stdout
        session.config.pluginmanager.get_plugin("terminalreporter").write_line(out.strip())
"""
CONFTEST_OOM = f"""\
import subprocess

def pytest_sessionfinish(session, exitstatus):
    if exitstatus != 0:
        subprocess.run(["bash", "-c", {OOM!r}])
"""
CONFTEST_DISKFILL = CONFTEST_OOM.replace(repr(OOM), repr(DISKFILL))


def host_may_lower_oom_score_adj() -> bool:
    """Whether this process has CAP_SYS_RESOURCE (a root without it, in a container or VM sandbox of
    its own, may not set a negative oom_score_adj, and neither may the runtimes it starts)."""
    status = Path("/proc/self/status").read_text()
    effective = int(next(line.split()[1] for line in status.splitlines() if line.startswith("CapEff:")), 16)
    return bool(effective & (1 << 24))  # CAP_SYS_RESOURCE


def new_file_patch(name: str, text: str) -> str:
    """A diff that adds the file ``name`` holding ``text``."""
    lines = text.splitlines()
    body = "".join(f"+{line}\n" for line in lines)
    head = f"diff --git a/{name} b/{name}\nnew file mode 100644\n--- /dev/null\n+++ b/{name}\n"
    return f"{head}@@ -0,0 +1,{len(lines)} @@\n{body}"


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
    "ptrace": [f"python3 - <<'EOF'\n{PTRACE}EOF"],
    "oom": [OOM],
    "diskfill": [DISKFILL],
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
            ctx.log(f"$ {step}\n(exit {r.exit_code}) {r.stdout}{r.stderr}")
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


def test_ptrace_and_oom_of_pid_1_stay_the_tasks_own_on_both_runtimes(runtimes: None, tmp_path: Path) -> None:
    """Issue 31: root inside attaches PID 1 with ptrace and continues it with SIGKILL, or raises PID 1's
    oom_score_adj to 1000 and uses up the sandbox's memory limit; from the agent's commands and from
    a predictions patch's conftest.py in the grading sandbox. ptrace is refused (PID 1 is not
    dumpable and no sandbox root has CAP_SYS_PTRACE); PID 1 killed by the sandbox's own memory limit
    is the task's failure: unresolved, error_kind agent, not masked, not retried."""
    agents = {"ptrace": "{type: hostile, steps: ptrace}", "oom": "{type: hostile, steps: oom}"}
    for name, conftest in (("gradeptrace", CONFTEST_PTRACE), ("gradeoom", CONFTEST_OOM)):
        predictions = tmp_path / f"{name}.jsonl"
        row = {"instance_id": "demo__inventory-4", "model_name_or_path": name}
        predictions.write_text(json.dumps(row | {"model_patch": new_file_patch("conftest.py", conftest)}) + "\n")
        agents[name] = f"{{type: replay, predictions: {predictions}}}"
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "name: hostile-pid1\ndataset: {name: demo-swebench, instance_ids: [demo__inventory-4]}\n"
        "agents:\n" + "".join(f"  {name}: {block}\n" for name, block in agents.items()) + "providers:\n"
        # A small memory limit: the limit is used up in a moment.
        "  docker: {type: docker, memory: 256m}\n  apptainer: {type: apptainer, overlay_size_mb: 256, memory: 256m}\n"
        "retries: {max_attempts: 3, backoff: 0.1}\n"
    )
    exp = Experiment.load(spec, run_dir=tmp_path / "run")
    exp.run(progress=False)
    attempts = read_results(exp.run_dir / "results.jsonl")
    assert len(attempts) == 8, attempts  # one row each: nothing was retried
    rows = {(r["agent"], r["provider"]): r for r in exp.results().iter_rows(named=True)}
    for (agent, provider), row in rows.items():
        task = exp.run_dir / "tasks" / row["key"]
        log = (task / "agent.log").read_text() if (task / "agent.log").exists() else ""
        output = (task / "test_output.txt").read_text() if (task / "test_output.txt").exists() else ""
        what = f"{agent} on {provider}: {row}\n{log}\n{output[-3000:]}"
        assert row["attempt"] == 1 and not row["mask_sample"] and not row["resolved"], what
        if agent in ("ptrace", "gradeptrace"):
            # Refused: PID 1 lived on, and the tests ran to their end.
            assert row["error_kind"] is None, what
            assert "ptrace attach -1 Operation not permitted" in (log if agent == "ptrace" else output), what
            if agent == "ptrace":
                # The OOM killer's last choice where the host may set it (a task may still raise it: below).
                lowest = -1000 if host_may_lower_oom_score_adj() else 0
                assert "PID 1 after: '/" in log and f"oom_score_adj of PID 1 at the start: {lowest}" in log, what
            else:
                assert row["patch_applied"] and "ended from inside the sandbox" not in output, what
            continue
        # PID 1 was the OOM kill of the sandbox's own limit: the agent's failure, with the evidence.
        evidence = "OOMKilled" if provider == "docker" else "OOM event(s) in its memory cgroup"
        assert row["error_kind"] == "agent" and "SandboxOutOfMemory" in row["error"], what
        assert "memory limit of 256m ran out" in row["error"] and evidence in row["error"], what
        if agent == "oom":
            assert "oom_score_adj of PID 1: 1000" in log, what
        else:
            assert row["patch_applied"] and "SandboxOutOfMemory" in output, what


def test_a_sandbox_that_writes_past_its_disk_limit_is_the_tasks_own_failure(runtimes: None, tmp_path: Path) -> None:
    """An agent, or a patch's conftest in the grading sandbox, writes 3 GB into the sandbox past a 300 MB
    limit. On docker (overlay2 over ext4 here: no size option, anyswe's watchdog) the sandbox is stopped
    before the host's disk takes much of it: the agent's failure, unresolved, not masked, not retried.
    On apptainer the overlay is full and the writes fail inside (the agent's capture too)."""
    agents = {"diskfill": "{type: hostile, steps: diskfill}"}
    predictions = tmp_path / "gradedisk.jsonl"
    row = {"instance_id": "demo__inventory-4", "model_name_or_path": "gradedisk"}
    predictions.write_text(json.dumps(row | {"model_patch": new_file_patch("conftest.py", CONFTEST_DISKFILL)}) + "\n")
    agents["gradedisk"] = f"{{type: replay, predictions: {predictions}}}"
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "name: hostile-disk\ndataset: {name: demo-swebench, instance_ids: [demo__inventory-4]}\n"
        "agents:\n" + "".join(f"  {name}: {block}\n" for name, block in agents.items()) + "providers:\n"
        "  docker: {type: docker, disk: 300m}\n  apptainer: {type: apptainer, overlay_size_mb: 300}\n"
        "retries: {max_attempts: 3, backoff: 0.1}\n"
    )
    exp = Experiment.load(spec, run_dir=tmp_path / "run")
    exp.run(progress=False)
    assert len(read_results(exp.run_dir / "results.jsonl")) == 4  # one row each: nothing was retried
    for row in exp.results().iter_rows(named=True):
        task = exp.run_dir / "tasks" / row["key"]
        log = (task / "agent.log").read_text() if (task / "agent.log").exists() else ""
        what = f"{row['agent']} on {row['provider']}: {row}\n{log}"
        assert row["attempt"] == 1 and not row["mask_sample"] and not row["resolved"], what
        if row["provider"] == "apptainer":
            # Its overlay is its limit: the writes failed inside, then the agent's capture did (the tests of
            # the grading sandbox still ran to their end).
            if row["agent"] == "diskfill":
                assert row["error_kind"] == "agent" and "No space left on device" in row["error"], what
            else:
                assert row["error_kind"] is None and row["patch_applied"], what
            continue
        assert "disk limit 300.0M per sandbox, by anyswe's watchdog on its writable layer" in log, what
        assert row["error_kind"] == "agent" and "SandboxDiskFull" in row["error"], what
        used = re.search(r"passed its disk limit of 300\.0M \(([0-9.]+)([MG]) in its writable layer", row["error"])
        assert used, what
        # Stopped long before the 3 GB it was writing reached the host's disk.
        assert float(used[1]) * (1024 if used[2] == "G" else 1) < 1500, what
