"""Shared by the benchmarks: throwaway specs (the sleeping agent on the demo; an agent on the real-image
tier), the agents with the scripted oracle, an ``anyswe apply`` process timed, and phase means."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # `bench.sleep_agent:SleepAgent` resolves from the checkout

SHARED = REPO.parent / "shared" / "swebench"
REAL_SPEC = REPO / "specs" / "real_images.yaml"
REAL_IMAGE = "swebench/sweb.eval.x86_64.{instance_id_docker}:latest"

#: Every agent but the model-free ones, by the short name the benches print. The turn cap is far above
#: what the oracle needs (two calls) so it never decides a row.
ORACLE_AGENTS: dict[str, dict[str, Any]] = {
    "mini": {"type": "mini-swe-agent", "step_limit": 40},
    "claude": {"type": "claude-code", "max_turns": 40},
    "codex": {"type": "codex", "max_turns": 40},
    "hermes": {"type": "hermes", "max_turns": 40},
    "opencode": {"type": "opencode", "max_turns": 40},
    "openclaw": {"type": "openclaw", "max_turns": 40},
    "pi": {"type": "pi", "max_turns": 40},
    "gemini": {"type": "gemini-cli", "max_turns": 40},
    "cline": {"type": "cline", "max_turns": 40},
}
#: The scripted model with no script: the oracle (the reference patch written, applied, submitted). Its
#: protocol is what mini-swe-agent, Pi and OpenClaw are told to speak; the others speak their own one
#: (Claude Code Anthropic's, Codex Responses, Gemini CLI Google's) and the gateway answers them in it.
#: openai-chat is one that every agent able to choose can speak.
SCRIPTED_ORACLE: dict[str, Any] = {"api": "scripted", "protocol": "openai-chat"}


def sleep_spec(
    work: Path, *, provider: str, tasks: int, seconds: float, concurrency: int, instance: str = "demo__calc-1"
) -> Path:
    """A spec of ``tasks`` samples of one demo instance, the sleeping agent, one provider."""
    spec: dict[str, Any] = {
        "name": f"bench-{provider}-{concurrency}",
        "dataset": {"name": "demo", "instance_ids": [instance]},
        "agents": {"sleep": {"type": "bench.sleep_agent:SleepAgent", "seconds": seconds}},
        # Two sandboxes per task in flight: one being removed in the background while the next starts.
        "providers": {provider: {"type": provider, "concurrency": 2 * max(concurrency, 1)}},
        "samples": tasks,
        "concurrency": concurrency,
        "output_dir": str(work / f"run-{provider}-{concurrency}-{time.monotonic_ns()}"),
    }
    path = work / f"spec-{provider}-{concurrency}.yaml"
    path.write_text(json.dumps(spec))
    return path


def run_spec(path: Path) -> tuple[float, list[dict[str, Any]]]:
    """Apply ``path`` in this process; (wall seconds, result rows)."""
    from anyswe import Experiment

    exp = Experiment.load(path)
    t = time.perf_counter()
    exp.run(progress=False)
    wall = time.perf_counter() - t
    rows = [json.loads(line) for line in (exp.run_dir / "results.jsonl").read_text().splitlines()]
    return wall, rows


def workdir() -> Path:
    return Path(tempfile.mkdtemp(prefix="anyswe-bench-"))


def real_ids() -> list[str]:
    """The instance ids of ``specs/real_images.yaml``, in its order."""
    from ruamel.yaml import YAML

    return list(YAML(typ="safe").load(REAL_SPEC.read_text())["dataset"]["instance_ids"])


def real_spec(
    work: Path,
    provider: str,
    concurrency: int,
    ids: list[str],
    *,
    agent: tuple[str, dict[str, Any]] = ("gold", {"type": "gold"}),
    model: dict[str, Any] | None = None,
    timeouts: dict[str, float] | None = None,
) -> tuple[Path, Path]:
    """A spec of one agent over ``ids`` on ``provider`` (the real-image template), gold unless told:
    (spec file, run directory)."""
    name, block = agent
    run = work / f"{name}-{provider}-{concurrency}-{time.monotonic_ns()}"
    extra = {"memory": "4g"} if provider == "docker" else {"overlay_size_mb": 2048}
    spec: dict[str, Any] = {
        "name": f"bench-{name}",
        "dataset": {"name": "swe-bench-verified", "path": str(SHARED / "verified.jsonl"), "instance_ids": ids},
        "agents": {name: block},
        # Two sandboxes per task in flight: the agent's is removed while the grading one runs.
        "providers": {provider: {"type": provider, "image": REAL_IMAGE, "concurrency": 2 * concurrency, **extra}},
        "concurrency": concurrency,
        "retries": {"max_attempts": 1},
        "output_dir": str(run),
    }
    if model is not None:
        spec["models"] = {"m": model}
    if timeouts is not None:
        spec["timeouts"] = timeouts
    path = work / f"spec-{name}-{provider}-{concurrency}.yaml"
    path.write_text(json.dumps(spec))
    return path, run


def apply_process(path: Path, run: Path, env: dict[str, str] | None = None) -> tuple[float, list[dict[str, Any]]]:
    """``python -m anyswe apply path`` as a whole process, as a user runs it: (wall seconds, its rows).

    Its exit code is not checked: a run whose tasks failed exits 1 and still has its rows, which the
    bench reports. A run with no rows at all measured nothing: its output's tail ends the bench."""
    t = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "anyswe", "apply", str(path)], capture_output=True, text=True, cwd=REPO, env=env
    )
    wall = time.perf_counter() - t
    results = run / "results.jsonl"
    if not results.is_file():
        raise SystemExit(f"{path}: anyswe apply exited {proc.returncode} with no rows:\n{proc.stderr[-3000:]}")
    return wall, [json.loads(line) for line in results.read_text().splitlines()]


def phase_means(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Each of TIME_FIELDS -> its mean over ``rows`` (a phase a row never reached counts 0)."""
    from anyswe.results.schema import TIME_FIELDS

    return {f: statistics.mean(r[f] or 0.0 for r in rows) for f in TIME_FIELDS}


def median_phases(rounds: list[dict[str, float]]) -> dict[str, float]:
    """Each phase's median over the rounds' means."""
    return {f: statistics.median(x[f] for x in rounds) for f in rounds[0]}


def phases_line(per: dict[str, float]) -> str:
    """``image 0.12, ..., total 9.80 (in no phase: 0.01)``: the phases sum to the total, less what no
    phase timed."""
    # Rounded first and + 0.0: a float sum's -0.001 would print as "-0.00".
    rest = round(per["time_total"] - sum(v for k, v in per.items() if k != "time_total"), 2) + 0.0
    shown = ", ".join(f"{k.removeprefix('time_')} {v:.2f}" for k, v in per.items())
    return f"{shown} (in no phase: {rest:.2f})"
