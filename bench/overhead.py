"""Benchmark: anyswe's per-task overhead against the bare runtime doing the same container operations.

Per task, anyswe starts a sandbox, checks the repository (the seal: once per sealed image, so here
in the first task only), runs the agent (here: one `sleep 0` exec), checks the sandbox is alive,
captures the patch (git), and removes the sandbox; an empty patch needs no grading sandbox. The
baseline, measured in the same run and alternating with it, does the same by hand with the same
options: `docker run -d` / `docker exec` (the agent's command and a `git diff`) / `docker rm -f`;
or `apptainer overlay create` / `instance start` / `exec` x2 / `instance stop`. Prints figures and
the ratio; never asserts.

    uv run python bench/overhead.py [--tasks 8] [--rounds 3] [--provider docker --provider apptainer]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from _common import run_spec, sleep_spec, workdir


def _image(provider: str) -> str:
    """The demo task's runnable image, built (and converted) once, outside the timings."""
    from anyswe.datasets import load_dataset
    from anyswe.images.resolve import ImageResolver, ImageSource
    from anyswe.sandbox import get_provider

    ds = load_dataset("demo")
    inst = ds.by_id()["demo__calc-1"]
    prov = get_provider(provider)
    return asyncio.run(ImageResolver().image_for(prov, ImageSource(build_dataset="demo"), inst))


def bare_docker(image: str) -> float:
    t = time.perf_counter()
    name = f"bench-{uuid.uuid4().hex[:8]}"
    subprocess.run(
        ["docker", "run", "-d", "--name", name, "--network", "none", "--init", image, "sleep", "infinity"],
        check=True, capture_output=True,
    )  # fmt: skip
    subprocess.run(["docker", "exec", name, "sleep", "0"], check=True, capture_output=True)
    subprocess.run(["docker", "exec", "-w", "/testbed", name, "git", "diff", "HEAD"], capture_output=True)
    subprocess.run(["docker", "rm", "-f", name], check=True, capture_output=True)
    return time.perf_counter() - t


def bare_apptainer(image: str) -> float:
    t = time.perf_counter()
    name = f"bench-{uuid.uuid4().hex[:8]}"
    state = Path(tempfile.mkdtemp(prefix="bench-"))
    try:
        (state / "work").mkdir()
        subprocess.run(
            ["apptainer", "overlay", "create", "--sparse", "--size", "4096", str(state / "o.img")],
            check=True, capture_output=True,
        )  # fmt: skip
        subprocess.run(
            ["apptainer", "instance", "start", "--contain", "--cleanenv", "--overlay", str(state / "o.img"),
             "--workdir", str(state / "work"), "--net", "--network", "none", image, name],
            check=True, capture_output=True,
        )  # fmt: skip
        subprocess.run(["apptainer", "exec", f"instance://{name}", "sleep", "0"], check=True, capture_output=True)
        subprocess.run(
            ["apptainer", "exec", "--pwd", "/testbed", f"instance://{name}", "git", "diff", "HEAD"], capture_output=True
        )
        subprocess.run(["apptainer", "instance", "stop", name], check=True, capture_output=True)
    finally:
        shutil.rmtree(state, ignore_errors=True)
    return time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--provider", action="append", default=None)
    args = parser.parse_args()
    work = workdir()
    for provider in args.provider or ["docker", "apptainer"]:
        image = _image(provider)
        bare = bare_docker if provider == "docker" else bare_apptainer
        run_spec(sleep_spec(work, provider=provider, tasks=2, seconds=0, concurrency=1))  # warm-up
        bare(image)
        ours, theirs, critical = [], [], []
        for _ in range(args.rounds):
            wall, rows = run_spec(sleep_spec(work, provider=provider, tasks=args.tasks, seconds=0, concurrency=1))
            ours.append(wall / args.tasks)
            critical.append(statistics.mean(r["time_total"] for r in rows))
            theirs.append(statistics.mean(bare(image) for _ in range(args.tasks)))
        a, b, c = statistics.median(ours), statistics.median(theirs), statistics.median(critical)
        print(f"{provider}: anyswe {a:.3f} s/task (wall, whole run incl. driver), bare runtime {b:.3f} s/cycle")
        print(f"{provider}: a task's own time_total {c:.3f} s; ratio anyswe/bare: wall {a / b:.2f}x, task {c / b:.2f}x")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
