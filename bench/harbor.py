"""Benchmark: anyswe against Harbor 0.26.0 on the 8 demo tasks, each with its reference agent, on local docker.

Both tools run the same tasks in the same image, as whole processes, alternating in each round:

* anyswe: ``python -m anyswe apply`` of a one-off spec (the demo instances, agent ``gold``, provider
  docker, concurrency c): gold applies the reference patch, a fresh sandbox grades it;
* Harbor (PyPI ``harbor==0.26.0`` in a venv of its own, ``docker compose`` from a private DOCKER_CONFIG:
  ``scripts/provision.sh harbor``, run here when missing): ``harbor run -a oracle -e docker -n c`` over
  the demo tasks converted at bench time into Harbor's format (task.toml naming anyswe's demo image as
  its prebuilt ``docker_image``, a compose file with ``network_mode: none``, solution/solve.sh applying the
  reference patch, tests/test.sh applying the test patch and running the task's tests in the same container);
* Harbor +init: the same, with an ``--extra-docker-compose`` overlay (a Harbor option, no patch) giving
  the container ``init: true``. By default its PID 1 is ``sleep infinity``, which ignores SIGTERM, so every
  ``docker compose down`` waits out docker's 10 s stop grace.

The images are built once before the timings (anyswe's demo build), so neither side builds or pulls.
Per task: the whole run's figures over the number of tasks, median of the rounds:

* wall: the process's wall time; own: a task's own time as its tool records it (anyswe's time_total,
  Harbor's trial started_at..finished_at), median over the tasks;
* CPU tree: user+sys of the process and every descendant it waited for (getrusage RUSAGE_CHILDREN);
* CPU daemon: dockerd's and containerd's utime+stime, with their reaped children's (/proc/<pid>/stat);
  not the per-container shims and runc below them, which are reparented to PID 1;
* CPU in containers: the docker cgroup's CPU (cpuacct; hierarchical, so removed containers stay counted):
  the tests, git, the containers' init.

The daemon's and the containers' CPU is the whole daemon's: measure on an otherwise idle docker. The
verdicts are compared per task (gold and oracle should resolve all 8). Figures, never asserts.

    uv run python bench/harbor.py [--concurrency 1 --concurrency 4] [--rounds 3] [--tasks 8] [--no-init] [--count-calls]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from _common import REPO, workdir

HARBOR_VERSION = "0.26.0"
LABEL = {"anyswe": "anyswe gold", "harbor": "Harbor oracle", "harbor-init": "Harbor oracle +init"}
HARBOR_ENV = {"HARBOR_TELEMETRY": "0", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}  # offline: no telemetry, no fetch


@dataclass
class Run:
    """One whole-process run of one side: its figures and verdicts."""

    wall: float
    tree: float
    daemon: float
    containers: float
    own: list[float] = field(default_factory=list)
    resolved: dict[str, bool] = field(default_factory=dict)
    #: What labels its containers: anyswe's run id, Harbor's trial names (its compose projects, lower case).
    owners: set[str] = field(default_factory=set)


def harbor_home() -> Path:
    from anyswe.config import cache_dir

    return cache_dir() / "bench" / "harbor"


def ensure_harbor() -> Path:
    """Harbor's venv (from bench/locks/harbor.txt) and the private DOCKER_CONFIG: scripts/provision.sh
    makes them, or finds them as its lock names them, before anything is timed."""
    home = harbor_home()
    # The cache dir handed over explicitly, so the script and this module agree on it.
    env = {**os.environ, "ANYSWE_CACHE": str(home.parents[1])}
    subprocess.run(["bash", str(REPO / "scripts" / "provision.sh"), "harbor"], check=True, env=env)
    return home


def demo_images(ids: list[str]) -> dict[str, str]:
    """instance id -> the image anyswe runs it in, built now (outside the timings); Harbor gets the same."""
    from anyswe.datasets import load_dataset
    from anyswe.images.resolve import ImageResolver, ImageSource
    from anyswe.sandbox import get_provider

    by_id = load_dataset("demo").by_id()
    prov, resolver, source = get_provider("docker"), ImageResolver(), ImageSource(build_dataset="demo")

    async def build() -> list[str]:
        return list(await asyncio.gather(*(resolver.image_for(prov, source, by_id[i]) for i in ids)))

    return dict(zip(ids, asyncio.run(build()), strict=True))


def harbor_task(root: Path, row: dict[str, Any], image: str) -> None:
    """One demo row as a Harbor task directory (Harbor's own layout; its template: `harbor init`)."""
    task = root / row["instance_id"]
    for sub in ("environment", "solution", "tests"):
        (task / sub).mkdir(parents=True, exist_ok=True)
    (task / "instruction.md").write_text(row["problem_statement"] + "\n")
    (task / "task.toml").write_text(
        'schema_version = "1.4"\n\n[metadata]\n\n[agent]\ntimeout_sec = 300.0\n\n[verifier]\ntimeout_sec = 300.0\n\n'
        f'[environment]\ndocker_image = {json.dumps(image)}\nworkdir = "/testbed"\n'
    )
    # Sealed like anyswe's sandboxes; Harbor's own no-network mode needs sidecar images from a registry.
    (task / "environment" / "docker-compose.yaml").write_text("services:\n  main:\n    network_mode: none\n")
    (task / "solution" / "gold.diff").write_text(row["patch"])
    (task / "solution" / "solve.sh").write_text(
        "#!/bin/bash\nset -e\ncd /testbed\ngit apply --verbose /solution/gold.diff\n"
    )
    (task / "tests" / "test.diff").write_text(row["test_patch"])
    # The task's own tests by id: pytest exits 0 only when every one of them passed.
    ids = " ".join(shlex.quote(t) for t in [*row["FAIL_TO_PASS"], *row["PASS_TO_PASS"]])
    (task / "tests" / "test.sh").write_text(
        "#!/bin/bash\ncd /testbed\nreward=0\n"
        "if git apply --verbose /tests/test.diff &&\n"
        f"  python3 -m pytest -rA -p no:cacheprovider {ids}; then reward=1; fi\n"
        'echo "$reward" > /logs/verifier/reward.txt\n'
    )
    for script in (task / "solution" / "solve.sh", task / "tests" / "test.sh"):
        script.chmod(0o755)


def harbor_tasks(work: Path, ids: list[str], images: dict[str, str]) -> Path:
    from anyswe.datasets.demo import rows

    root = work / "harbor-tasks"
    for row in rows():
        if row["instance_id"] in ids:
            harbor_task(root, row, images[row["instance_id"]])
    return root


def daemon_pids() -> list[int]:
    """dockerd's and containerd's processes (by their command name, as ps shows them)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() in ("dockerd", "containerd"):
                    pids.append(int(entry.name))
            except OSError:  # gone meanwhile
                continue
    return pids


def daemon_cpu(pids: list[int]) -> float:
    """utime+stime of ``pids`` and of the children they reaped, in seconds (nan if one of them is gone)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return float("nan")  # the daemon restarted under the run
        total += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime (fields 14-17)
    return total / os.sysconf("SC_CLK_TCK")


def containers_cpu() -> float:
    """CPU seconds of everything that ever ran in a docker container (cgroupfs driver), nan if unknown."""
    v1 = Path("/sys/fs/cgroup/cpuacct/docker/cpuacct.usage")
    if v1.is_file():
        return int(v1.read_text()) / 1e9
    v2 = Path("/sys/fs/cgroup/docker/cpu.stat")
    if v2.is_file():
        usage = dict(line.split() for line in v2.read_text().splitlines())
        return int(usage["usage_usec"]) / 1e6
    return float("nan")


def measured(argv: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None) -> Run:
    """Run ``argv`` to its end and take its wall time and CPU (its tree, the daemon, the containers)."""
    pids = daemon_pids()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    d0, c0, t0 = daemon_cpu(pids), containers_cpu(), time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    d1, c1 = daemon_cpu(pids), containers_cpu()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.exit(f"{argv[0]} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    tree = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Run(wall=wall, tree=tree, daemon=d1 - d0, containers=c1 - c0)


def anyswe_run(work: Path, ids: list[str], concurrency: int, *, path_dir: Path | None = None) -> Run:
    out = work / f"anyswe-{concurrency}-{time.monotonic_ns()}"
    spec = {
        "name": "bench-harbor",
        "dataset": {"name": "demo", "instance_ids": ids},
        "agents": {"gold": {"type": "gold"}},
        # Two sandboxes per task in flight: the agent's is removed while the grading one runs.
        "providers": {"docker": {"type": "docker", "concurrency": 2 * concurrency}},
        "concurrency": concurrency,
        "retries": {"max_attempts": 1},
        "output_dir": str(out),
    }
    path = work / f"spec-{concurrency}.json"
    path.write_text(json.dumps(spec))
    env = with_path(dict(os.environ), path_dir)
    run = measured([sys.executable, "-m", "anyswe", "apply", str(path)], env=env, cwd=REPO)
    rows = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    run.own = [float(r["time_total"]) for r in rows]
    run.resolved = {r["instance_id"]: bool(r["resolved"]) for r in rows}
    run.owners = {r["run_id"] for r in rows}
    return run


def harbor_run(work: Path, tasks: Path, concurrency: int, *, init: bool, path_dir: Path | None = None) -> Run:
    home = harbor_home()
    jobs, name = work / "harbor-jobs", f"bench-{concurrency}-{time.monotonic_ns()}"
    argv = [str(home / "venv" / "bin" / "harbor"), "run", "-p", str(tasks), "-a", "oracle", "-e", "docker"]
    argv += ["-n", str(concurrency), "-o", str(jobs), "--job-name", name, "-q", "-y"]
    if init:
        overlay = work / "harbor-init.yaml"
        overlay.write_text("services:\n  main:\n    init: true\n")
        argv += ["--extra-docker-compose", str(overlay)]
    env = with_path({**os.environ, **HARBOR_ENV, "DOCKER_CONFIG": str(home / "docker-config")}, path_dir)
    run = measured(argv, env=env, cwd=work)
    for result in sorted((jobs / name).glob("*/result.json")):
        trial = json.loads(result.read_text())
        start, end = (datetime.fromisoformat(trial[k]) for k in ("started_at", "finished_at"))
        run.own.append((end - start).total_seconds())
        rewards = (trial.get("verifier_result") or {}).get("rewards") or {}
        run.resolved[trial["task_name"]] = rewards.get("reward") == 1.0
        run.owners.add(trial["trial_name"].lower())
    return run


def with_path(env: dict[str, str], path_dir: Path | None) -> dict[str, str]:
    """``env`` with ``path_dir`` first on PATH (the counting shim), or as it is."""
    if path_dir is not None:
        env["PATH"] = f"{path_dir}{os.pathsep}{env.get('PATH', '')}"
    return env


def docker_shim(work: Path) -> tuple[Path, Path]:
    """A ``docker`` first on PATH that logs each call's argv and runs the real one: (its dir, the log).

    One record per call, in one write: the arguments (a script passed to exec spans lines) end in
    US (0x1f), the record in RS (0x1e)."""
    real = shutil.which("docker") or "docker"
    shim_dir, log = work / "shim", work / "docker-calls.log"
    shim_dir.mkdir(exist_ok=True)
    shim = shim_dir / "docker"
    shim.write_text(
        f"#!/bin/bash\nprintf '%s\\037' \"$@\" $'\\036' >> {shlex.quote(str(log))}\nexec {shlex.quote(real)} \"$@\"\n"
    )
    shim.chmod(0o755)
    return shim_dir, log


def call_kind(argv: list[str]) -> str:
    """A docker CLI call's command, options left out: `exec`, `container run`, `compose exec`..."""
    out, skip = [], False
    for word in argv:
        if skip or word.startswith("-"):
            # Options with a separate value (compose's -f FILE, --project-name NAME...).
            skip = not skip and word in ("-f", "--file", "-p", "--project-name", "--project-directory", "--config")
            continue
        out.append(word)
        if out[0] not in ("compose", "container", "image", "network", "volume") or len(out) == 2:
            break
    return " ".join(out)


def count_calls(work: Path, ids: list[str], tasks: Path, sides: list[str]) -> None:
    """One untimed run per side at concurrency 1 through the shim: docker CLI calls and containers per task."""
    shim_dir, log = docker_shim(work)
    for side in sides:
        log.write_text("")
        # Streamed, not asked afterwards: the daemon keeps only its last 256 events, and it is shared.
        argv = ["docker", "events", "--since", f"{time.time():.3f}", "--filter", "type=container"]
        events = subprocess.Popen(
            [*argv, "--filter", "event=create", "--format", "{{json .Actor.Attributes}}"], stdout=subprocess.PIPE
        )
        if side == "anyswe":
            run = anyswe_run(work, ids, 1, path_dir=shim_dir)
        else:
            run = harbor_run(work, tasks, 1, init=side.endswith("init"), path_dir=shim_dir)
        time.sleep(1)  # the last events on their way
        events.terminate()
        made = sum(ours(json.loads(x), run.owners) for x in events.communicate()[0].splitlines())
        calls = [call_kind(r.split("\x1f")) for r in log.read_text().split("\x1e\x1f") if r]
        kinds = sorted(set(calls), key=lambda k: -calls.count(k))
        shown = ", ".join(f"{k} {calls.count(k) / len(ids):.1f}" for k in kinds)
        print(f"{LABEL[side]}: {len(calls) / len(ids):.1f} docker CLI calls per task ({shown}); "
              f"{made / len(ids):.1f} containers per task")  # fmt: skip


def ours(labels: dict[str, str], owners: set[str]) -> bool:
    """Whether a container with ``labels`` is the run's (anyswe's run id; Harbor's trial's compose project)."""
    project = labels.get("com.docker.compose.project", "")
    return labels.get("anyswe.run_id") in owners or any(project.startswith(o) for o in owners)


def one_run(side: str, work: Path, ids: list[str], tasks: Path, concurrency: int) -> Run:
    if side == "anyswe":
        return anyswe_run(work, ids, concurrency)
    return harbor_run(work, tasks, concurrency, init=side == "harbor-init")


COLUMNS = {"wall": "wall", "own": "own", "tree": "CPU tree", "daemon": "CPU daemon", "containers": "CPU in ctrs"}


def per_task(runs: list[Run], n: int) -> dict[str, float]:
    """The median of the rounds, per task: a run's figure over its tasks (own: the median task's own)."""
    med = statistics.median
    fig = {k: med(getattr(r, k) for r in runs) / n for k in ("wall", "tree", "daemon", "containers")}
    fig["own"] = med(med(r.own) if r.own else float("nan") for r in runs)
    fig["cpu"] = fig["tree"] + fig["daemon"] + fig["containers"]
    return fig


def table(runs: dict[str, list[Run]], n: int) -> None:
    names = [*COLUMNS.values(), "CPU total"]
    print(f"{'seconds per task':<30}" + "".join(f"{h:>12}" for h in names))
    figs = {side: per_task(rs, n) for side, rs in runs.items()}
    for side, fig in figs.items():
        print(f"{LABEL[side]:<30}" + "".join(f"{fig[k]:>12.2f}" for k in [*COLUMNS, "cpu"]))
    for other in [s for s in figs if s != "anyswe"]:
        ratios = [figs["anyswe"][k] / figs[other][k] if figs[other][k] else float("nan") for k in [*COLUMNS, "cpu"]]
        print(f"{'anyswe / ' + LABEL[other]:<30}" + "".join(f"{x:>11.2f}x" for x in ratios))


def verdicts(runs: dict[str, list[Run]], ids: list[str]) -> None:
    """Each task's verdicts over the rounds, and whether the sides agreed on it in every round."""
    rounds = range(len(runs["anyswe"]))
    same = all(len({rs[i].resolved.get(t) for rs in runs.values()}) == 1 for i in rounds for t in ids)
    print(f"verdicts (resolved / reward 1 in each round): the same per task in every round: {same}")
    for t in ids:
        shown = ", ".join(
            f"{LABEL[s]} {sum(r.resolved.get(t) is True for r in rs)}/{len(rs)}" for s, rs in runs.items()
        )
        print(f"  {t}: {shown}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrency", type=int, action="append", help="repeatable (default: 1 and 4)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tasks", type=int, default=8, help="the first N demo tasks, by instance id")
    ap.add_argument("--no-init", action="store_true", help="leave out Harbor with `init: true`")
    ap.add_argument("--count-calls", action="store_true", help="first count docker CLI calls and containers")
    args = ap.parse_args()
    from anyswe.datasets.demo import task_dirs

    ids = sorted(task_dirs())[: args.tasks]
    sides = ["anyswe", "harbor"] + ([] if args.no_init else ["harbor-init"])
    ensure_harbor()
    work = workdir()
    images = demo_images(ids)
    tasks, warm = harbor_tasks(work, ids, images), harbor_tasks(work / "warm", ids[:1], images)
    for side in sides:  # untimed: the page cache, each side's imports
        one_run(side, work, ids[:1], warm, 1)
    print(f"{len(ids)} demo tasks, anyswe gold vs Harbor {HARBOR_VERSION} oracle on docker, images built beforehand,")
    print(f"{os.cpu_count()} cores, {args.rounds} rounds alternating (median)")
    if args.count_calls:
        count_calls(work, ids, tasks, sides)
    for c in args.concurrency or [1, 4]:
        runs: dict[str, list[Run]] = {s: [] for s in sides}
        for i in range(args.rounds):
            for side in sides:
                run = one_run(side, work, ids, tasks, c)
                runs[side].append(run)
                done = sum(run.resolved.values())
                print(f"  [c={c} round {i + 1}] {LABEL[side]}: {run.wall:.1f} s, {done}/{len(ids)}", file=sys.stderr)
        print(f"\nconcurrency {c}:")
        table(runs, len(ids))
        verdicts(runs, ids)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
