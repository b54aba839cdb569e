"""The Ray executor on a real two-node Ray cluster on this machine: a head advertising docker only and
a second node advertising docker and apptainer (started with `ray start`). The demo spec gives the
same results task by task as the local executor; a node killed mid-run still ends with every task
recorded once and no sandbox left behind."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest
from gymkit import gym_python

__all__ = ["gym_python"]  # the fixture, used by name

# Alone (exclusive), after the parallel part: beside another worker's tests on 2 cores a Ray node
# missed Ray's fixed 30-s registration wait at start (GCS "Deadline Exceeded") in 2 CI rehearsals of 3.
pytestmark = [pytest.mark.containers, pytest.mark.exclusive, pytest.mark.usefixtures("runtimes")]

ANYSWE = [sys.executable, "-m", "anyswe"]
RAY = str(Path(sys.executable).parent / "ray")
# Ray's token authentication (the token in ~/.ray/auth_token) for every process of the cluster. The
# GCS checks each node's health every second rather than every 3 s (a cluster's own setting): a killed
# node is declared dead after 5 failed checks, in 5 s rather than 15, and nothing else changes (a
# node that answers slowly still has Ray's 10-s timeout per check).
ENV = {
    **os.environ,
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_AUTH_MODE": "token",
    "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0",
    "RAY_health_check_period_ms": "1000",
}
COMPARED = ("resolved", "patch_exists", "patch_applied", "exit_reason", "error_kind", "model_patch", "instance_id")


@dataclass
class Cluster:
    address: str
    head: subprocess.Popen[bytes]
    worker: subprocess.Popen[bytes]


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out


def _kill_tree(proc: subprocess.Popen[bytes]) -> None:
    for pid in _descendants(proc.pid):
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait(timeout=30)


def _start(*args: str, env: dict[str, str] = ENV) -> subprocess.Popen[bytes]:
    common = [
        "--node-ip-address",
        "127.0.0.1",
        "--num-cpus",
        "1",
        "--object-store-memory",
        "100000000",
        "--disable-usage-stats",
        "--block",
    ]
    log = tempfile.TemporaryFile()  # noqa: SIM115 - what `ray start` said, read on a failure
    proc = subprocess.Popen(
        [RAY, "start", *args, *common], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    _LOGS[proc.pid] = log
    return proc


_LOGS: dict[int, IO[bytes]] = {}


def _said(proc: subprocess.Popen[bytes]) -> str:
    """The last lines `ray start` printed."""
    log = _LOGS.get(proc.pid)
    if log is None:
        return ""
    log.seek(0)
    return log.read().decode(errors="replace")[-3000:]


def _ensure_token() -> None:
    """What a user does once before a token-authenticated cluster: make ~/.ray/auth_token if there is
    none (`ray start` never makes it; a fresh machine has none). Its output is the token: kept quiet."""
    r = subprocess.run([RAY, "get-auth-token", "--generate"], env=ENV, capture_output=True, check=False)
    assert r.returncode == 0, r.stderr.decode(errors="replace")[-2000:]


def _head(env: dict[str, str] = ENV) -> tuple[str, subprocess.Popen[bytes]]:
    """A head on a free port, started again if it exits while it starts: on a busy machine its raylet
    can miss Ray's fixed 30-s registration wait ("the current node timed out during startup") or its
    dashboard agent's port file (a fatal check in Ray). Nothing to do with what a test checks."""
    for attempt in range(3):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        address = f"127.0.0.1:{port}"
        head = _start(
            "--head", "--port", str(port), "--include-dashboard=false", "--resources", '{"docker": 2}', env=env
        )
        try:
            _wait_for_nodes(address, 1, head, env)
            return address, head
        except AssertionError:
            _kill_tree(head)
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


@contextmanager
def ray_cluster() -> Iterator[Cluster]:
    _ensure_token()
    address, head = _head()
    worker = None
    try:
        for attempt in range(3):  # the same for the second node (it exits when it cannot start)
            worker = _start("--address", address, "--resources", '{"docker": 1, "apptainer": 2}')
            try:
                _wait_for_nodes(address, 2, head, worker=worker)
                break
            except AssertionError:
                _kill_tree(worker)
                if attempt == 2:
                    raise
        assert worker is not None
        yield Cluster(address, head, worker)
    finally:
        if worker is not None and worker.poll() is None:
            _kill_tree(worker)
        _kill_tree(head)


def _wait_for_nodes(
    address: str,
    n: int,
    head: subprocess.Popen[bytes],
    env: dict[str, str] = ENV,
    worker: subprocess.Popen[bytes] | None = None,
) -> None:
    code = (
        "import ray, sys; ray.init(address=sys.argv[1], logging_level='ERROR'); "
        "print(sum(1 for x in ray.nodes() if x['Alive']))"
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert head.poll() is None, f"the Ray head exited: {_said(head)}"
        assert worker is None or worker.poll() is None, f"the second Ray node exited: {_said(worker)}"
        try:
            r = subprocess.run(
                [sys.executable, "-c", code, address], capture_output=True, text=True, env=env, timeout=90
            )
        except subprocess.TimeoutExpired:  # a head that died half-started can leave ray.init waiting forever
            continue
        if r.returncode == 0 and r.stdout.strip().splitlines()[-1:] == [str(n)]:
            return
        time.sleep(1)
    pytest.fail(f"the Ray cluster at {address} did not reach {n} nodes")


def _spec(tmp_path: Path, name: str, providers: list[str], ids: list[str]) -> Path:
    spec = {
        "name": name,
        "dataset": {"name": "demo", "instance_ids": ids},
        "agents": {"gold": {"type": "gold"}, "noop": {"type": "noop"}},
        "providers": {p: {"type": p} for p in providers},
        "output_dir": str(tmp_path / name),
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(json.dumps(spec))
    return path


def _rows(run_dir: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]


def _apply(spec: Path, *extra: str, env: dict[str, str] = ENV) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ANYSWE, "apply", str(spec), *extra], capture_output=True, text=True, env=env, timeout=1200)


def _sandboxes() -> dict[str, int]:
    """This run's docker containers -> the pid that started each (its owner label)."""
    r = subprocess.run(
        ["docker", "ps", "-a", "--filter", "label=anyswe.managed", "--format", '{{.Names}} {{.Label "anyswe.owner"}}'],
        capture_output=True,
        text=True,
    )
    out = {}
    for line in r.stdout.splitlines():
        name, _, owner = line.partition(" ")
        if owner and ":" in owner:
            out[name] = int(owner.rsplit(":", 1)[1])
    return out


def _apply_killing_the_second_node(spec: Path) -> tuple[subprocess.CompletedProcess[str], bool]:
    """Apply ``spec`` on a fresh cluster; kill the second node while one of its processes owns a sandbox."""
    with ray_cluster() as cluster:
        proc = subprocess.Popen(
            [*ANYSWE, "apply", str(spec), "--executor", "ray", "--address", cluster.address],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=ENV,
        )
        deadline = time.monotonic() + 300
        killed = False
        while time.monotonic() < deadline and proc.poll() is None:
            node = set(_descendants(cluster.worker.pid))
            if any(pid in node for pid in _sandboxes().values()):
                _kill_tree(cluster.worker)
                killed = True
                break
            time.sleep(0.2)
        out, err = proc.communicate(timeout=900)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), killed


def test_a_node_killed_mid_run_still_records_every_task_once(tmp_path: Path) -> None:
    ids = ["demo__calc-1", "demo__slug-2", "demo__settings-3", "demo__inventory-4", "demo__leap-5"]
    spec = _spec(tmp_path, "killed", ["docker"], ids)
    proc, killed = _apply_killing_the_second_node(spec)
    out, err = proc.stdout, proc.stderr
    assert killed, "no task ran on the second node before the run ended"
    assert proc.returncode == 0, out + err
    rows = _rows(tmp_path / "killed")
    keys = [str(r["key"]) for r in rows]
    assert len(keys) == len(set(keys)) == 10  # every task once: Ray re-ran the lost one elsewhere
    assert sum(bool(r["resolved"]) for r in rows) == 5 and not any(r["error_kind"] for r in rows)
    # The dead node's sandbox was collected by the driver (its owner is gone).
    left = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=anyswe.run_id={rows[0]['run_id']}"], capture_output=True, text=True
    )
    assert left.stdout.strip() == ""


def test_a_model_task_lost_with_its_node_runs_again_under_a_new_grant(tmp_path: Path) -> None:
    """mini-swe-agent with the scripted model (slow replies) on Ray; the second node is killed mid-task.

    On Ray a model unit gets only the gateway's address and runs inside a relay on its node
    (without it, the agent would have no endpoint), as on a cluster of several hosts.
    The lost attempt is an infra row with its own usage; the driver runs the task again with a fresh
    gateway token, so the final row's calls and trajectory are that attempt's alone."""
    ids = ["demo__calc-1", "demo__slug-2", "demo__settings-3"]
    spec = {
        "name": "model-killed",
        "dataset": {"name": "demo", "instance_ids": ids},
        "agents": {"mini": {"type": "mini-swe-agent", "step_limit": 20}},
        "models": {"slow": {"api": "scripted", "protocol": "openai-chat", "misbehave": "slow", "delay": 3}},
        "providers": {"docker": {"type": "docker"}},
        "retries": {"max_attempts": 3, "backoff": 1},
        "output_dir": str(tmp_path / "model-killed"),
    }
    path = tmp_path / "model-killed.yaml"
    path.write_text(json.dumps(spec))
    proc, killed = _apply_killing_the_second_node(path)
    assert killed, "no task ran on the second node before the run ended"
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = _rows(tmp_path / "model-killed")
    lost = [r for r in rows if r["error_kind"] == "infra"]
    final = {str(r["key"]): r for r in rows if r["error_kind"] is None}
    assert len(final) == 3 and all(r["resolved"] for r in final.values())
    assert len(rows) == len(final) + len(lost)  # one verdict per task; lost attempts only as infra rows
    assert lost and all("on the Ray cluster" in str(r["error"]) for r in lost), lost
    for r in lost:
        again = final[str(r["key"])]
        assert int(again["attempt"]) > int(r["attempt"])
        # The scripted oracle takes two calls (write and apply the fix, submit): the new attempt's own.
        assert again["model_calls"] == 2
        traj = tmp_path / "model-killed" / str(again["trajectory_path"])
        assert len(traj.read_text().splitlines()) == 2
        if r["model_calls"]:  # the lost attempt's calls are kept apart, where its row points
            assert str(r["trajectory_path"]).endswith(f"trajectory.attempt-{r['attempt']}.jsonl")
            spent = tmp_path / "model-killed" / str(r["trajectory_path"])
            assert len(spent.read_text().splitlines()) == r["model_calls"]


@pytest.fixture(scope="class")
def token_cluster() -> Iterator[str]:
    """The two-node cluster with token authentication (the token in ~/.ray/auth_token), shared by the
    tests that only run on it or join it (a cluster takes a while to start; none of them kills a node).
    Defined after the tests that kill a node of their own cluster: it starts when they are done."""
    with ray_cluster() as cluster:
        yield cluster.address


class TestOnATokenCluster:
    """The tests on one shared two-node token cluster (class-scoped: it is gone before the next starts)."""

    def test_ray_results_equal_the_local_executor_task_by_task(self, tmp_path: Path, token_cluster: str) -> None:
        ids = ["demo__calc-1", "demo__settings-3", "demo__stack-8"]
        local_spec = _spec(tmp_path, "local", ["docker", "apptainer"], ids)
        r = _apply(local_spec)
        assert r.returncode == 0, r.stdout + r.stderr
        ray_spec = tmp_path / "ray.yaml"
        ray_spec.write_text(local_spec.read_text().replace(str(tmp_path / "local"), str(tmp_path / "ray")))
        r = _apply(ray_spec, "--executor", "ray", "--address", token_cluster)
        assert r.returncode == 0, r.stdout + r.stderr
        local, remote = _rows(tmp_path / "local"), _rows(tmp_path / "ray")
        assert len(remote) == len(local) == 12
        by_key = {str(row["key"]): row for row in local}
        assert {str(row["key"]) for row in remote} == set(by_key)  # same tasks, each recorded once
        for row in remote:
            assert {k: row[k] for k in COMPARED} == {k: by_key[str(row["key"])][k] for k in COMPARED}, row["key"]
        assert sum(bool(row["resolved"]) for row in remote) == 6  # gold resolves on both backends
        # Every artefact the local run wrote, the driver wrote for the Ray run too.
        for row in remote:
            task_dir = tmp_path / "ray" / "tasks" / str(row["key"])
            assert (task_dir / "patch.diff").read_text() == row["model_patch"]

    def test_serve_runs_gym_rollouts_on_the_cluster(self, tmp_path: Path, token_cluster: str, gym_python: Path) -> None:
        """``anyswe serve`` as one server for many nodes (issue 23): Gym rows answered by rollouts that
        run as Ray tasks, a model task on the second node (the one with apptainer) through its relay."""
        import asyncio

        import aiohttp
        from gymkit import AUTH, gym_rows, serve_argv, started, validate

        config = tmp_path / "serve.yaml"
        config.write_text(
            json.dumps(
                {
                    "agent": {"type": "mini-swe-agent", "step_limit": 20},
                    "agents": {"gold": {"type": "gold"}},
                    "model": {"api": "scripted", "protocol": "openai-chat"},
                    "providers": {"apptainer": "apptainer"},
                    "dataset": "demo-swebench",
                    "executor": "ray",
                    "address": token_cluster,
                    "run_dir": str(tmp_path / "served"),
                }
            )
        )
        proc, url = started(serve_argv(config), env=ENV)
        rows = gym_rows(gym_python, ["demo__calc-1", "demo__inventory-4"])
        bodies = [
            {**rows[0], "anyswe": {"provider": "apptainer"}},
            {**rows[1], "anyswe": {"agent": "gold"}},
        ]

        async def post() -> list[dict[str, Any]]:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=900)) as session:

                async def one(body: dict[str, Any]) -> dict[str, Any]:
                    async with session.post(url + "/run", json=body, headers=AUTH) as resp:
                        assert resp.status == 200, await resp.text()
                        return dict(await resp.json())

                return list(await asyncio.gather(*(one(b) for b in bodies)))

        try:
            answers = asyncio.run(post())
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=120)
        assert [(a["reward"], a["mask_sample"], a["instance_config"]["provider"]) for a in answers] == [
            (1.0, False, "apptainer"),
            (1.0, False, "docker"),
        ], answers
        assert any(i["type"] == "function_call" for i in answers[0]["response"]["output"])  # the model's calls
        validate(gym_python, answers, tmp_path)
        recorded = _rows(tmp_path / "served")
        assert sorted(str(r["key"]) for r in recorded) == sorted(a["key"] for a in answers)

    def test_apply_joins_a_token_cluster_with_the_token_found_here(self, tmp_path: Path, token_cluster: str) -> None:
        """RAY_AUTH_MODE unset in the driver: the cluster asks for a token, and the one in ~/.ray/auth_token is used."""
        spec = _spec(tmp_path, "token", ["docker"], ["demo__calc-1"])
        r = _apply(spec, "--executor", "ray", "--address", token_cluster, env=DRIVER_ENV)
        assert r.returncode == 0, r.stdout + r.stderr
        rows = _rows(tmp_path / "token")
        assert len(rows) == 2 and sum(bool(row["resolved"]) for row in rows) == 1

    def test_a_token_cluster_without_a_token_here_is_a_clear_error(
        self, tmp_path: Path, token_cluster: str, tokenless_env: dict[str, str]
    ) -> None:
        spec = _spec(tmp_path, "no-token", ["docker"], ["demo__calc-1"])
        r = _apply(spec, "--executor", "ray", "--address", token_cluster, env=tokenless_env)
        _assert_clear_failure(r, "uses token authentication and this machine has no token", "~/.ray/auth_token")

    def test_a_token_cluster_refusing_the_token_here_is_a_clear_error(self, tmp_path: Path, token_cluster: str) -> None:
        spec = _spec(tmp_path, "wrong-token", ["docker"], ["demo__calc-1"])
        r = _apply(
            spec, "--executor", "ray", "--address", token_cluster, env={**DRIVER_ENV, "RAY_AUTH_TOKEN": "not-it"}
        )
        _assert_clear_failure(r, "refuses this machine's Ray token", "RAY_AUTH_TOKEN")
        r = _apply(
            spec, "--executor", "ray", "--address", token_cluster, env={**DRIVER_ENV, "RAY_AUTH_MODE": "disabled"}
        )
        _assert_clear_failure(r, "uses token authentication", "RAY_AUTH_MODE=disabled")


# --- Joining a cluster in the authentication mode it runs (issue 21) ---------------------------------
# One single-node head per mode for these tests (a head takes a while to start); each test only joins it.

#: The driver's environment with RAY_AUTH_MODE unset, as a user's shell has it.
DRIVER_ENV = {k: v for k, v in ENV.items() if k != "RAY_AUTH_MODE"}


@contextmanager
def _single_head(mode: str) -> Iterator[str]:
    """A head started as ``ray start --head`` with ``RAY_AUTH_MODE=mode``, advertising docker; its address."""
    address, head = _head({**ENV, "RAY_AUTH_MODE": mode})
    try:
        yield address
    finally:
        _kill_tree(head)  # its process tree only: `ray stop` would stop every Ray on this machine


@pytest.fixture(scope="module")
def open_cluster() -> Iterator[str]:
    """A cluster without token authentication (what `ray start --head` makes on a machine with no token)."""
    with _single_head("disabled") as address:
        yield address


@pytest.fixture
def tokenless_env(tmp_path: Path) -> dict[str, str]:
    """A driver on a machine with no Ray token: a home without ~/.ray (anyswe's cache kept where it is,
    so its images and helper are not made again)."""
    from anyswe.config import cache_dir

    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in DRIVER_ENV.items() if k not in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")}
    return {**env, "HOME": str(home), "ANYSWE_CACHE": str(cache_dir())}


def _assert_clear_failure(r: subprocess.CompletedProcess[str], *fix: str) -> None:
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    for words in fix:
        assert words in out, out
    for crash in ("Traceback", "Check failed", "bug in Ray", "StackTrace"):
        assert crash not in out, out
    token = Path.home().joinpath(".ray", "auth_token")
    leaked = token.exists() and token.read_text().strip() in out
    assert not leaked, "the output holds the Ray token"


def test_apply_joins_a_cluster_without_token_authentication(
    tmp_path: Path, open_cluster: str, tokenless_env: dict[str, str]
) -> None:
    """The issue: a default head on a machine with no token; the driver used to abort in Ray's C++."""
    spec = _spec(tmp_path, "open", ["docker"], ["demo__calc-1"])
    r = _apply(spec, "--executor", "ray", "--address", open_cluster, env=tokenless_env)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = _rows(tmp_path / "open")
    assert len(rows) == 2 and sum(bool(row["resolved"]) for row in rows) == 1  # gold resolves, noop not


def test_apply_with_a_token_here_joins_an_open_cluster(tmp_path: Path, open_cluster: str) -> None:
    """This machine has a token (~/.ray/auth_token) but the cluster does not use one: it joins all the same."""
    _ensure_token()
    spec = _spec(tmp_path, "open-token-here", ["docker"], ["demo__calc-1"])
    r = _apply(spec, "--executor", "ray", "--address", open_cluster, env=DRIVER_ENV)
    assert r.returncode == 0, r.stdout + r.stderr
    assert len(_rows(tmp_path / "open-token-here")) == 2


def test_token_mode_without_a_token_at_a_cluster_without_authentication_is_a_clear_error(
    tmp_path: Path, open_cluster: str, tokenless_env: dict[str, str]
) -> None:
    """The mismatch Ray makes fatal (its C++ check on a missing token): an error that names the fix."""
    spec = _spec(tmp_path, "mismatch", ["docker"], ["demo__calc-1"])
    env = {**tokenless_env, "RAY_AUTH_MODE": "token"}
    r = _apply(spec, "--executor", "ray", "--address", open_cluster, env=env)
    _assert_clear_failure(r, "does not use token authentication", "unset RAY_AUTH_MODE")
    results = tmp_path / "mismatch" / "results.jsonl"
    assert not results.exists() or not results.read_text().strip()  # no task ran
