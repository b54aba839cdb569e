"""Issue 21, "the host can be exhausted from inside a task": what a sandbox can cost the host is bounded.

Output kept per command, docker's memory and pids limits (a fork bomb), apptainer's /tmp and home
inside the size-limited overlay, on the real runtimes.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from anyswe import _proc
from anyswe.errors import SandboxExecError, SandboxFileError, SandboxPidsExhausted
from anyswe.grading.ladder import EVAL_OUTPUT_BYTES
from anyswe.results.schema import SCHEMA_VERSION
from anyswe.sandbox import Sandbox, get_provider, reap

pytestmark = pytest.mark.containers


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def test_command_output_is_capped_and_counted(provider_image: tuple[str, str], tmp_path: Path) -> None:
    name, image = provider_image
    log = tmp_path / "stream.log"

    async def go() -> None:
        async with get_provider(name).sandbox(image) as sb:
            # 40 MB of stdout, a line of stderr: stdout keeps its head and its tail, stderr is whole.
            r = await sb.exec("head -c 40000000 /dev/zero | tr '\\0' x; echo END; echo oops >&2")
            assert r.ok and r.truncated and r.stderr == "oops\n" and r.stderr_dropped == 0
            assert r.stdout_dropped == 40_000_004 - _proc.MAX_OUTPUT_BYTES
            assert r.stdout.startswith("x" * 1000) and r.stdout.endswith("xxxEND\n")
            assert f"[anyswe: {r.stdout_dropped} bytes of stdout cut here" in r.stdout
            # A smaller cap per exec, and the streamed log file on the host bounded by it too.
            seen: list[int] = []
            r = await sb.exec_stream(
                "head -c 1000000 /dev/zero", log_path=log, max_output=4096, on_output=lambda s, t: seen.append(len(t))
            )
            assert r.stdout_dropped == 1_000_000 - 4096 and sum(seen) == 1_000_000
            assert 4096 < log.stat().st_size < 4096 + 200 and b"the rest of stdout cut here" in log.read_bytes()
            # A file over the output cap reads back whole, and copies out whole: streamed, not capped
            # (inspect_ai's conformance suite reads back 50 MiB). A limit asked for is kept.
            assert (await sb.exec(["dd", "if=/dev/zero", "of=/big.bin", "bs=1M", "count=17"])).ok
            assert (await sb.read_file("/big.bin")) == bytes(17 << 20)
            await sb.copy_out("/big.bin", tmp_path / "big.bin")
            assert (tmp_path / "big.bin").read_bytes() == bytes(17 << 20)
            with pytest.raises(SandboxFileError, match="too large to read back"):
                await sb.read_file("/big.bin", max_output=16 << 20)
            assert (await sb.exec("echo alive")).stdout == "alive\n"

    run(go())


def _pids(sb: Sandbox[Any]) -> int:
    """How many processes the sandbox holds, counted from the host (PID 1 included)."""
    init = asyncio.run(sb.provider.init_pid(sb.name))
    assert init is not None, f"no host pid for {sb.name}"
    return 1 + len(reap.members(init))


def _limit(sb: Sandbox[Any], controller: str, name: str) -> str:
    init = asyncio.run(sb.provider.init_pid(sb.name))
    assert init is not None
    cgroup = reap.cgroup_of(init, controller)
    assert cgroup is not None
    return (cgroup / name).read_text().strip()


def test_docker_sandboxes_have_memory_and_pids_limits_by_default(docker_image: str) -> None:
    from python_on_whales import docker

    async def go() -> None:
        async with get_provider("docker").sandbox(docker_image) as sb:
            host = docker.container.inspect(sb.name).host_config
            assert host.memory == 8 * 1024**3 and host.memory_swap == 8 * 1024**3 and host.pids_limit == 4096
        # null in a spec turns a limit off, a value changes it.
        async with get_provider("docker", {"memory": None, "pids_limit": None}).sandbox(docker_image) as sb:
            host = docker.container.inspect(sb.name).host_config
            assert not host.memory and not host.memory_swap and host.pids_limit in (None, 0, -1)
        async with get_provider("docker", {"memory": "300m", "pids_limit": 64}).sandbox(docker_image) as sb:
            host = docker.container.inspect(sb.name).host_config
            assert host.memory == host.memory_swap == 300 * 1024**2 and host.pids_limit == 64

    run(go())


def test_apptainer_sandboxes_have_memory_and_pids_limits_as_root(sif_image: str) -> None:
    """As docker's: cgroups of the instance, which apptainer sets for root (scripts/provision.sh points
    its cgroups manager at cgroupfs where systemd is not PID 1). Of 120 processes, those past 64 pids do not start."""
    assert os.geteuid() == 0  # CI runs as root; a rootless sandbox has its job's limits
    # How many of 120 processes start (then all end): a fork past the limit fails with EAGAIN.
    sleeps = (
        "import subprocess\nps = []\ntry:\n    for _ in range(120):\n"
        "        ps.append(subprocess.Popen(['sleep', '20']))\nexcept OSError:\n    pass\n"
        "print(len(ps))\nfor p in ps:\n    p.kill()\n"
    )

    async def check(options: dict[str, Any], pids: str | None, memory: int | None) -> int:
        async with get_provider("apptainer", options).sandbox(sif_image) as sb:
            if pids is not None:
                assert await asyncio.to_thread(_limit, sb, "pids", "pids.max") == pids
            if memory is not None:
                init = await sb.provider.init_pid(sb.name)
                v1 = reap.cgroup_of(init or 0, "memory")
                name = "memory.limit_in_bytes" if v1 and (v1 / "memory.limit_in_bytes").exists() else "memory.max"
                assert int(await asyncio.to_thread(_limit, sb, "memory", name)) == memory
            return int((await sb.exec(["python3", "-c", sleeps], timeout=60)).stdout)

    run(check({}, "4096", 8 * 1024**3))
    assert run(check({"memory": "300m", "pids_limit": 64}, "64", 300 * 1024**2)) < 64
    assert run(check({"memory": None, "pids_limit": None}, None, None)) == 120


BOMB = "bomb() { bomb | bomb & }; bomb"


# A fork bomb takes every CPU of the host while it runs, as it would on a real one: a concurrent test's
# Ray head, starved, failed to start. These run alone (`exclusive`), after the parallel part.
@pytest.mark.exclusive
def test_a_fork_bomb_stays_in_its_sandbox(provider_image: tuple[str, str]) -> None:
    """The bomb fills the sandbox's 4096 pids and no more (its forks past them fail: the pids cgroup
    counts them); the host still forks; the sandbox recovers."""
    name, image = provider_image

    async def go() -> None:
        async with get_provider(name).sandbox(image) as sb:
            bomb = asyncio.ensure_future(sb.exec(f"{BOMB}; sleep 30", timeout=8))
            peak = await _peak(sb)
            refused = await asyncio.to_thread(_limit, sb, "pids", "pids.events")
            # The host is fine meanwhile: it starts processes, and its own count is far from pid_max.
            assert subprocess.run(["true"]).returncode == 0
            host_pids = sum(1 for p in Path("/proc").iterdir() if p.name.isdigit())
            pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
            assert peak <= 4096 and int(refused.split()[-1]) > 0, (peak, refused)  # "max N": N forks refused
            assert host_pids < pid_max - 4096, (host_pids, pid_max)
            r = await bomb
            assert r.timed_out
            # The helper killed the bomb's process group at the timeout: the sandbox takes commands again.
            await _takes_commands(sb)
        assert sb.name not in await get_provider(name).sandboxes()

    run(go())


async def _peak(sb: Sandbox[Any]) -> int:
    """The most processes seen in the sandbox until its pids cgroup refused a fork (or 30 s)."""
    peak = 0
    for _ in range(60):
        await asyncio.sleep(0.5)
        peak = max(peak, await asyncio.to_thread(_pids, sb))
        if int((await asyncio.to_thread(_limit, sb, "pids", "pids.events")).split()[-1]) > 0:
            break
    return peak


async def _takes_commands(sb: Sandbox[Any]) -> None:
    for _ in range(40):
        alive = await sb.exec("echo alive", timeout=10)
        if alive.stdout == "alive\n":
            return
        await asyncio.sleep(0.5)
    raise AssertionError(f"{sb.name} takes no command: {alive}")


@pytest.mark.exclusive  # a fork bomb: see above
def test_a_fork_bomb_out_of_its_group_is_ended_from_the_host(provider_image: tuple[str, str]) -> None:
    """A bomb in a session of its own outlives its command's timeout (the helper kills the command's
    group). The task's end ends it from the host (anyswe/sandbox/reap.py), and while it fills the
    sandbox, a command the runtime cannot start there is the task's failure, not the runtime's."""
    name, image = provider_image

    async def go() -> None:
        async with get_provider(name).sandbox(image) as sb:
            assert await reap.end_strays(sb) == 0  # nothing to end yet
            r = await sb.exec(f"setsid bash -c '{BOMB}' >/dev/null 2>&1 </dev/null & sleep 1; echo started", timeout=5)
            assert "started" in r.stdout or r.timed_out, r
            await _peak(sb)
            refused = await asyncio.to_thread(_limit, sb, "pids", "pids.events")
            assert int(refused.split()[-1]) > 0, refused  # the bomb reached the limit
            init = await sb.provider.init_pid(sb.name)
            assert init is not None and await asyncio.to_thread(reap.at_pids_limit, init)
            failed = _proc.ProcResult(["docker", "exec"], 126, b"", b"OCI runtime exec failed", 0.1, False)
            assert isinstance(await reap.runtime_failure(sb, failed), SandboxPidsExhausted)
            ended = await reap.end_strays(sb)
            # The bomb's thousands: how many are alive at the freeze swings as they exit and fork (3874
            # and 3886 of 4096 in two runs); that none is left shows below.
            assert ended is not None and ended >= 3 * 4096 // 4, ended
            await _takes_commands(sb)
            ps = await sb.exec(["ps", "-e", "--no-headers", "-o", "pid"])
            assert len(ps.stdout.split()) <= 4, ps  # PID 1, the helper running ps, ps (and a shell)
            assert not await asyncio.to_thread(reap.at_pids_limit, init)
            assert isinstance(await reap.runtime_failure(sb, failed), SandboxExecError)

    run(go())


def test_apptainer_tmp_and_home_are_inside_the_size_limited_overlay(sif_image: str, tmp_path: Path) -> None:
    """200 MB to /tmp, /var/tmp or $HOME of a sandbox with a 64 MB overlay: ENOSPC, and the host's
    disk holds no more than the overlay (before, /tmp and $HOME were a work dir on the host's disk)."""
    provider = get_provider("apptainer", {"overlay_size_mb": 64, "state_dir": str(tmp_path / "state")})

    def allocated(root: Path) -> int:
        return sum(p.lstat().st_blocks * 512 for p in root.rglob("*") if not p.is_symlink())

    async def go() -> None:
        async with provider.sandbox(sif_image) as sb:
            state = provider.config.state_dir / sb.name
            r = await sb.exec('echo "$HOME"; df --output=target /tmp /var/tmp "$HOME" | tail -n +2')
            assert r.stdout.split() == ["/root", "/", "/", "/"], r
            for where in ("/tmp", "/var/tmp", "/root"):
                r = await sb.exec(["dd", "if=/dev/zero", f"of={where}/big.bin", "bs=1M", "count=200"])
                assert r.exit_code != 0 and "No space left on device" in r.stderr, (where, r)
                # Everything the sandbox wrote is in its overlay image, which is the size it was given.
                assert sorted(p.name for p in state.iterdir()) == ["instance.pid", "labels.json", "overlay.img"]
                assert allocated(state) < 70 * 1024 * 1024, allocated(state)
                assert (await sb.exec(["rm", f"{where}/big.bin"])).ok
            # The sandbox works on once the space is freed (/tmp is the image's, sticky and world-writable).
            assert (await sb.exec("stat -c %a /tmp && echo ok > /tmp/small && cat /tmp/small")).stdout == "1777\nok\n"
            r = await sb.exec("touch /tmp/mine && echo ok", user="nobody")
            assert r.stdout == "ok\n", r

    run(go())


GOLD_ON_DOCKER = """\
name: caps
dataset: {name: demo, limit: 1}
agents:
  gold: {type: gold}
providers:
  docker: {type: docker}
timeouts: {agent: 300, grading: 300}
limits: {max_patch_bytes: 100}
"""


def test_a_patch_over_the_cap_fails_the_task_and_stays_out_of_the_run_directory(
    docker_image: str, tmp_path: Path
) -> None:
    """A real run: the demo's gold patch (a few hundred bytes) over a 100-byte cap."""
    import json

    from anyswe.experiment import Experiment

    (tmp_path / "spec.yaml").write_text(GOLD_ON_DOCKER)
    exp = Experiment.load(tmp_path / "spec.yaml", run_dir=tmp_path / "run")
    exp.run(progress=False)
    (row,) = [json.loads(line) for line in (tmp_path / "run" / "results.jsonl").read_text().splitlines()]
    assert (row["resolved"], row["error_kind"], row["mask_sample"]) == (False, "agent", False), row
    assert (
        row["schema_version"] == SCHEMA_VERSION and row["model_patch"] == "" and row["limit_hit"] == "max_patch_bytes"
    )
    assert row["patch_bytes"] > 100 and row["max_patch_bytes"] == 100
    assert row["error"] == f"PatchTooLarge: the patch is {row['patch_bytes']} bytes, over the 100-byte cap"
    task = tmp_path / "run" / "tasks" / row["key"]
    assert (task / "patch.diff").read_text() == "" and "not graded, not kept" in (task / "agent.log").read_text()


def test_a_100_mb_file_captured_is_over_the_patch_cap(docker_image: str, tmp_path: Path) -> None:
    """The issue's case: a 100 MB file in the repository. Capture keeps 16 MiB of it, the cap refuses it."""
    from anyswe.agents import AgentOutcome, ExitReason
    from anyswe.execute.classify import AgentRun, Trace
    from anyswe.execute.task import capture_patch, patch_within_cap
    from anyswe.execute.unit import make_unit
    from anyswe.plan import make_plan
    from anyswe.spec import load_spec

    (tmp_path / "spec.yaml").write_text(GOLD_ON_DOCKER.replace("limits: {max_patch_bytes: 100}\n", ""))
    plan = make_plan(load_spec(tmp_path / "spec.yaml"))
    unit = make_unit(plan, plan.tasks[0], run_id="r", attempt=1)

    async def go() -> str:
        async with get_provider("docker").sandbox(docker_image) as sb:
            setup = "git init -q /repo && cd /repo && git -c user.name=a -c user.email=a@b commit -q --allow-empty -m s"
            assert (await sb.exec(setup)).ok
            assert (await sb.exec("head -c 75000000 /dev/urandom | base64 > /repo/big.txt")).ok
            head = (await sb.exec(["git", "rev-parse", "HEAD"], workdir="/repo")).stdout.strip()
            return await capture_patch(sb, "/repo", head)

    patch = run(go())
    assert "bytes of stdout cut here" in patch
    trace, agent_run = Trace(), AgentRun(AgentOutcome(exit_reason=ExitReason.SUBMITTED))
    assert patch_within_cap(unit, agent_run, patch, trace) == ""
    assert trace.limit_hit == "max_patch_bytes" and "bytes or more, over the 10485760-byte cap" in str(agent_run.error)


def test_an_eval_log_over_its_cap_is_not_graded_and_not_masked(docker_image: str, tmp_path: Path) -> None:
    """The gold fix plus a conftest.py that prints 80 MB at the end of the test run: the log is cut, so
    it is not graded (a status line cut from its middle would read as a failed test), and since the
    patch did it, the task counts as unresolved: masking it would buy the patch another attempt."""
    import json

    from anyswe.datasets import load_dataset
    from anyswe.experiment import Experiment

    instance = load_dataset("demo").instances[0]
    noisy = 'def pytest_terminal_summary(terminalreporter):\n    terminalreporter.write("x" * 80_000_000 + "\\n")\n'
    lines = "".join(f"+{line}\n" for line in noisy.splitlines())
    conftest = "diff --git a/conftest.py b/conftest.py\nnew file mode 100644\n--- /dev/null\n+++ b/conftest.py\n"
    conftest += f"@@ -0,0 +1,{len(noisy.splitlines())} @@\n{lines}"
    prediction = {
        "instance_id": instance.instance_id,
        "model_name_or_path": "m",
        "model_patch": instance.patch + conftest,
    }
    (tmp_path / "preds.jsonl").write_text(json.dumps(prediction) + "\n")
    spec = GOLD_ON_DOCKER.replace(
        "gold: {type: gold}", f"replay: {{type: replay, predictions: {tmp_path / 'preds.jsonl'}}}"
    )
    (tmp_path / "spec.yaml").write_text(spec.replace("limits: {max_patch_bytes: 100}\n", ""))
    exp = Experiment.load(tmp_path / "spec.yaml", run_dir=tmp_path / "run")
    exp.run(progress=False)
    (row,) = [json.loads(line) for line in (tmp_path / "run" / "results.jsonl").read_text().splitlines()]
    assert (row["resolved"], row["error_kind"], row["mask_sample"], row["patch_applied"]) == (False, None, False, True)
    assert row["limit_hit"] == "eval_output_bytes", row
    output = (tmp_path / "run" / "tasks" / row["key"] / "test_output.txt").read_text()
    assert f"over the {EVAL_OUTPUT_BYTES}-byte cap: not graded" in output
