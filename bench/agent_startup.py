"""Each agent's start-up and per-step cost, against mini-swe-agent's, for the same scripted steps.

Every agent runs the same demo task (demo__calc-1) on one runtime at concurrency 1, twice over: with
the scripted oracle (two model calls: the fix, then the final answer) and with a script of the same
fix after ``--extra`` no-op shell steps (``true``). The scripted model answers at once, so an agent's
``time_agent`` is its own cost: the difference between the two runs, over the extra steps, is its
cost per step, and what the oracle run takes beyond two such steps is its start-up (and exit). The
baseline is mini-swe-agent (driven from the host) in the same run; the ratios are against it.

    uv run python bench/agent_startup.py [--provider docker] [--samples 3] [--extra 6] [--agent openclaw ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench._common import ORACLE_AGENTS, SCRIPTED_ORACLE, run_spec, workdir  # noqa: E402


def _spec(work: Path, agents: dict[str, dict[str, object]], provider: str, samples: int, script: Path | None) -> Path:
    model: dict[str, object] = dict(SCRIPTED_ORACLE)
    if script is not None:
        model["script"] = str(script)
    spec = {
        "name": f"agent-startup-{'script' if script else 'oracle'}",
        "dataset": {"name": "demo-swebench", "instance_ids": ["demo__calc-1"]},
        "agents": agents,
        "models": {"m": model},
        "providers": {provider: {"type": provider, "concurrency": 2}},
        "samples": samples,
        "concurrency": 1,
        "timeouts": {"agent": 900, "grading": 300},
        "output_dir": str(work / f"run-{'script' if script else 'oracle'}"),
    }
    path = work / f"spec-{'script' if script else 'oracle'}.yaml"
    path.write_text(json.dumps(spec))
    return path


def _median_agent_time(agents: list[str], rows: list[dict[str, object]]) -> dict[str, tuple[float, int]]:
    """agent -> (median time_agent, model calls of one task); every row must have resolved."""
    out: dict[str, tuple[float, int]] = {}
    for agent in agents:
        mine = [r for r in rows if r["agent"] == agent]
        bad = [r for r in mine if not r["resolved"]]
        if bad or not mine:
            raise SystemExit(f"{agent}: {len(bad)} of {len(mine)} tasks did not resolve: {bad[:1]}")
        times = [float(r["time_agent"]) for r in mine]  # type: ignore[arg-type]
        out[agent] = (statistics.median(times), int(mine[0]["model_calls"]))  # type: ignore[call-overload]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--provider", default="docker")
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--extra", type=int, default=6, help="no-op steps before the fix in the longer run")
    parser.add_argument(
        "--agent",
        action="append",
        choices=[a for a in ORACLE_AGENTS if a != "mini"],
        help="only these (and mini); repeatable",
    )
    args = parser.parse_args()
    agents = {a: ORACLE_AGENTS[a] for a in ORACLE_AGENTS if not args.agent or a == "mini" or a in args.agent}
    from anyswe.datasets import load_dataset

    work = workdir()
    patch = load_dataset("demo-swebench").by_id()["demo__calc-1"].patch
    scripts = work / "scripts"
    scripts.mkdir()
    # The oracle's own fix (a here-document and git apply: no command substitution, which Gemini CLI
    # blocks, and a plain rm, since Codex refuses rm -f) after the no-op steps.
    fix = f"cd /testbed && cat > /tmp/fix.diff <<'EOF_FIX'\n{patch}EOF_FIX\ngit apply /tmp/fix.diff && rm /tmp/fix.diff"
    # Distinct no-ops: Gemini CLI stops a turn that repeats one tool call five times (its loop detection).
    noops = [f"echo step {i}" for i in range(args.extra)]
    (scripts / "demo__calc-1.json").write_text(json.dumps({"steps": [*noops, fix]}))
    _, short_rows = run_spec(_spec(work, agents, args.provider, args.samples, None))
    _, long_rows = run_spec(_spec(work, agents, args.provider, args.samples, scripts))
    short, long = _median_agent_time(list(agents), short_rows), _median_agent_time(list(agents), long_rows)
    per_step = {a: (long[a][0] - short[a][0]) / (long[a][1] - short[a][1]) for a in agents}
    startup = {a: short[a][0] - short[a][1] * per_step[a] for a in agents}
    calls = f"calls: oracle {short['mini'][1]}, script {long['mini'][1]}"
    print(f"{args.provider}, {args.samples} samples, concurrency 1; {calls}; medians of time_agent")
    # mini-swe-agent runs on the host, inside anyswe's process: it has no start-up of its own to speak of,
    # so the others' start-up is shown beside it, not as a ratio; their cost per step is a ratio to its.
    head = ("agent", "oracle s", "script s", "start-up s", "per step ms", "x mini")
    print(f"{head[0]:10} {head[1]:>9} {head[2]:>9} {head[3]:>11} {head[4]:>12} {head[5]:>7}")
    for a in agents:
        ratio = per_step[a] / per_step["mini"] if per_step[a] > 0 and per_step["mini"] > 0 else float("nan")
        print(f"{a:10} {short[a][0]:9.2f} {long[a][0]:9.2f} {startup[a]:11.2f} {1000 * per_step[a]:12.0f} {ratio:7.1f}")
    print("(a per-step cost at or below 0 is under the noise of the medians: a few tens of ms)")


if __name__ == "__main__":
    main()
