"""Benchmark: end-to-end oracle-agent tasks per core-hour on the real-image tier, against gold's grading alone.

The SWE-bench Verified instances of ``specs/real_images.yaml`` (images built here offline with swebench's
official names: ``anyswe prepare images specs/real_images.yaml --build --repo-mirror ../shared/swebench/repos``),
on docker and apptainer at concurrency ``c``. Each agent (mini-swe-agent and every CLI agent) works with
anyswe's scripted oracle, which writes the reference patch, applies it and submits: the model answers at
once, so what a task costs beyond gold's is the agent's own (its sandbox, start-up, steps, exit) and its
patch's capture. The baseline, measured in the same run on the same instances, provider and concurrency,
is the gold agent: the reference patch graded, with no agent process and no model.

Every run is a whole ``python -m anyswe apply`` process, as a user runs it; within a round gold and the
agents take turns, in an order shifted by one each round so that none always runs first on a fresh
machine or last on a tired one. Images, SIFs and agent bundles are made before anything is timed; the
repositories' seal findings are cached by any earlier run (a fresh cache: the first run pays them).

Printed per provider and agent: resolved count (gold resolves all but sphinx-doc__sphinx-10323, whose
gold fails two PASS_TO_PASS tests with today's packages; the oracle should match gold's verdicts) and
whether its verdicts equal gold's in every round, wall seconds (median of the rounds), tasks per
core-hour (tasks x 3600 / wall / cores), the ratio to gold's, and the mean of each phase of its rows
(which sum to time_total): where its time goes. A task that failed or disagrees with gold is listed
with its error and its task directory. Figures, never asserts.

    uv run python bench/agent_throughput.py [--agent mini --agent pi] [--provider docker] [--concurrency 2]
        [--instances 7] [--rounds 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _common import (
    ORACLE_AGENTS,
    REPO,
    SCRIPTED_ORACLE,
    SHARED,
    apply_process,
    median_phases,
    phase_means,
    phases_line,
    real_ids,
    real_spec,
    workdir,
)

GOLD = "gold"
REPOS = SHARED / "repos"
#: The oracle needs seconds: a hung agent ends as a timeout long before the default 1800 s would.
AGENT_TIMEOUTS = {"agent": 600.0}


@dataclass
class Round:
    """One ``anyswe apply`` of one agent: its wall, verdicts, phase means, rows and run directory (where
    a failed task's logs are)."""

    wall: float
    verdicts: dict[str, bool]
    phases: dict[str, float]
    rows: list[dict[str, Any]]
    run: Path


@dataclass
class Series:
    """One agent's rounds on one provider, and whether each round's verdicts equalled gold's of that round."""

    rounds: list[Round] = field(default_factory=list)
    agrees: list[bool] = field(default_factory=list)


def _warm(work: Path, providers: list[str], agents: list[str], ids: list[str], concurrency: int) -> None:
    """Images, apptainer's SIFs and the agents' bundles made before anything is timed: otherwise the
    first run of each would pay for them. A missing image is built offline as the docstring says, never
    pulled; one already present is left alone."""
    from anyswe.agents import agent_class
    from anyswe.agents.bundles import ensure_bundle

    for provider in providers:
        path, _ = real_spec(work, provider, concurrency, ids)
        argv = [sys.executable, "-m", "anyswe", "prepare", "images", str(path), "--build", "--repo-mirror", str(REPOS)]
        proc = subprocess.run(argv, capture_output=True, text=True, cwd=REPO)
        if proc.returncode != 0:
            raise SystemExit(f"anyswe prepare images ({provider}) exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    for name in agents:
        recipe = getattr(agent_class(ORACLE_AGENTS[name]["type"]), "bundle", None)
        if recipe is not None:  # mini-swe-agent runs on the host: no bundle
            ensure_bundle(recipe)


def _run(work: Path, provider: str, concurrency: int, ids: list[str], name: str) -> Round:
    """One ``anyswe apply`` process of ``name`` (gold, or an agent with the scripted oracle) over ``ids``."""
    if name == GOLD:
        path, run = real_spec(work, provider, concurrency, ids)
    else:
        agent = (name, ORACLE_AGENTS[name])
        path, run = real_spec(
            work, provider, concurrency, ids, agent=agent, model=SCRIPTED_ORACLE, timeouts=AGENT_TIMEOUTS
        )
    wall, rows = apply_process(path, run)
    print(f"  {provider}: {name} {wall:.1f} s", file=sys.stderr, flush=True)  # a long bench shows it is alive
    return Round(wall, {r["instance_id"]: bool(r["resolved"]) for r in rows}, phase_means(rows), rows, run)


def _measure(
    work: Path, provider: str, concurrency: int, ids: list[str], names: list[str], rounds: int
) -> dict[str, Series]:
    """Each of ``names`` (gold first) once a round, the order shifted by one each round."""
    series = {name: Series() for name in names}
    for k in range(rounds):
        shift = k % len(names)
        done = {name: _run(work, provider, concurrency, ids, name) for name in names[shift:] + names[:shift]}
        for name, rnd in done.items():
            series[name].rounds.append(rnd)
            series[name].agrees.append(rnd.verdicts == done[GOLD].verdicts)
    return series


def _notes(rnd: Round, gold: dict[str, bool]) -> list[str]:
    """A line per task that failed or whose verdict is not gold's, and where its logs are."""
    out = []
    for r in rnd.rows:
        want = gold.get(r["instance_id"])
        if r["error_kind"] is None and bool(r["resolved"]) == want:
            continue
        error = (r["error"] or "").strip().splitlines()
        out.append(
            f"    {r['instance_id']}: resolved {r['resolved']} (gold {want}), {r['error_kind'] or 'no error'}, "
            f"exit {r['exit_reason']}, {r['model_calls']} model calls{': ' + error[0][:300] if error else ''}"
        )
        out.append(f"      logs: {rnd.run / 'tasks' / r['key']}")
    return out


def _report(provider: str, concurrency: int, n: int, cores: int, series: dict[str, Series]) -> None:
    gold = series[GOLD]
    base = statistics.median(r.wall for r in gold.rounds)
    print(f"\n{provider}, concurrency {concurrency}:")
    head = ("agent", "resolved", "= gold", "wall s", "tasks/core-h", "x gold")
    print(f"{head[0]:10} {head[1]:>9} {head[2]:>7} {head[3]:>8} {head[4]:>13} {head[5]:>7}")
    for name, s in series.items():
        wall = statistics.median(r.wall for r in s.rounds)
        counts = sorted({sum(r.verdicts.values()) for r in s.rounds})  # a range when the rounds differ
        resolved = f"{'-'.join(map(str, counts))}/{n}"
        same = "yes" if all(s.agrees) else "no"
        print(f"{name:10} {resolved:>9} {same:>7} {wall:8.1f} {n * 3600 / wall / cores:13.0f} {base / wall:7.2f}")
        print(f"  per task: {phases_line(median_phases([r.phases for r in s.rounds]))}")
        for rnd, g in zip(s.rounds, gold.rounds, strict=True):
            for line in _notes(rnd, g.verdicts):
                print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agent", action="append", choices=list(ORACLE_AGENTS), help="repeatable; default all")
    parser.add_argument("--provider", action="append", choices=["docker", "apptainer"], help="default both")
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--instances", type=int, default=7, help="the first N instances of specs/real_images.yaml")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    agents = list(dict.fromkeys(args.agent or ORACLE_AGENTS))
    providers = list(dict.fromkeys(args.provider or ["docker", "apptainer"]))
    ids, cores, work = real_ids()[: args.instances], os.cpu_count() or 1, workdir()
    _warm(work, providers, agents, ids, args.concurrency)
    print(
        f"{len(ids)} instances, the scripted oracle ({SCRIPTED_ORACLE['protocol']}) against gold, images and "
        f"bundles ready, {cores} cores, {args.rounds} round(s) (median); x gold: tasks/core-hour over gold's"
    )
    for provider in providers:
        _report(
            provider,
            args.concurrency,
            len(ids),
            cores,
            _measure(work, provider, args.concurrency, ids, [GOLD, *agents], args.rounds),
        )


if __name__ == "__main__":
    main()
