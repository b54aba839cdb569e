"""Benchmark: what one task costs in runtime CLI calls and container starts, by subcommand.

Runs gold over the 7 real-image instances of ``specs/real_images.yaml`` (images cached) on each
provider, with a directory first on ``PATH`` whose ``docker`` and ``apptainer`` log their argv and
exec the real binary (python-on-whales and the apptainer provider both find their binary on
``PATH``). The provider's helper and reaper work through the kernel (pidfds, cgroup files), not the
CLI, so they are not counted. Prints calls per task by subcommand, container starts per task, and
the row's phases (which sum to its total). Figures, never asserts.

    uv run python bench/runtime_calls.py [--provider docker --provider apptainer] [--concurrency 2]
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
from pathlib import Path

from _common import apply_process, phase_means, phases_line, real_ids, real_spec, workdir

# One line per call: a script passed as an argument has its newlines folded into spaces.
SHIM = """#!/bin/sh
printf '%s\\n' "$(printf '%s ' "$@" | tr '\\n' ' ')" >> {log}
exec {real} "$@"
"""
#: The subcommands that start a container (docker) or an instance (apptainer).
STARTS = {("docker", "run"), ("docker", "container run"), ("docker", "create"), ("apptainer", "instance start")}


def _shims(work: Path) -> dict[str, Path]:
    """``work/bin/<runtime>`` wrappers, and the log each appends to."""
    bindir = work / "bin"
    bindir.mkdir(exist_ok=True)
    logs = {}
    for name in ("docker", "apptainer"):
        real = shutil.which(name)
        if real is None:
            continue
        logs[name] = work / f"{name}.calls"
        shim = bindir / name
        shim.write_text(SHIM.format(log=logs[name], real=real))
        shim.chmod(0o755)
    return logs


def _subcommand(runtime: str, line: str) -> str:
    """``docker container inspect`` -> "container inspect"; options before the verb are skipped."""
    words = [w for w in line.split() if not w.startswith("-")]
    if runtime == "apptainer" and words[:1] == ["instance"]:
        return " ".join(words[:2])
    if words[:1] in (["container"], ["image"], ["network"], ["volume"]):
        return " ".join(words[:2])
    return words[0] if words else "(none)"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--provider", action="append", choices=["docker", "apptainer"])
    ap.add_argument("--concurrency", type=int, default=2)
    args = ap.parse_args()
    ids, work = real_ids(), workdir()
    logs = _shims(work)
    env = {**os.environ, "PATH": f"{work / 'bin'}:{os.environ['PATH']}"}
    for provider in args.provider or ["docker", "apptainer"]:
        for log in logs.values():
            log.unlink(missing_ok=True)
        _, rows = apply_process(*real_spec(work, provider, args.concurrency, ids), env=env)
        n = len(rows)
        counts: collections.Counter[tuple[str, str]] = collections.Counter()
        for runtime, log in logs.items():
            if log.is_file():
                counts.update((runtime, _subcommand(runtime, x)) for x in log.read_text().splitlines())
        starts = sum(c for k, c in counts.items() if k in STARTS)
        total = sum(counts.values())
        print(f"\n{provider}: {n} tasks (gold), {total / n:.1f} runtime CLI calls, ", end="")
        print(f"{starts / n:.1f} container starts per task")
        for (runtime, sub), c in counts.most_common():
            print(f"  {runtime} {sub}: {c / n:.2f} per task ({c} in all)")
        print(f"  phases per task (s): {phases_line(phase_means(rows))}")


if __name__ == "__main__":
    main()
