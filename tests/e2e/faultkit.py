"""Fault injection against the real runtimes: kill, stop and restart things under a running experiment,
then check that every task is recorded exactly once, with the right verdict or a masked infra error,
and that nothing is left behind.

The workload is mini-swe-agent driven by the scripted oracle model (a reply every two seconds, so the
agent phase lasts long enough to be hit) over demo tasks: every task resolves when nothing breaks,
so any recorded "unresolved" (or agent error) is a wrong verdict. Used by ``test_fault_suite.py``
and runnable on its own; it writes the figures into docs/reliability.md with ``--write``::

    uv run python tests/e2e/faultkit.py --rounds 2 --write
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
INSTANCES = ["demo__calc-1", "demo__inventory-4", "demo__retry-7", "demo__stack-8"]

SPEC = """\
name: faults
dataset: {{name: demo, instance_ids: [{instances}]}}
agents:
  mini: {{type: mini-swe-agent, step_limit: 20}}
models:
  slow: {{api: scripted, protocol: openai-chat, misbehave: slow, delay: 2}}
providers:
  p: {{type: {provider}, concurrency: 2}}
retries: {{max_attempts: 3, backoff: 1}}
concurrency: 2
timeouts: {{agent: 300, grading: 300}}
"""


@dataclass
class Figures:
    """What one scenario did and found."""

    scenario: str
    provider: str
    faults: int = 0
    missed: int = 0
    tasks: int = 0
    wrong: int = 0
    lost: int = 0
    duplicated: int = 0
    orphans_after_apply: int = 0
    orphans_after_gc: int = 0
    applies: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.wrong == self.lost == self.duplicated == self.orphans_after_gc == 0 and self.tasks > 0


# -- running anyswe -----------------------------------------------------------------------------


def _env(session: str) -> dict[str, str]:
    return {**os.environ, "ANYSWE_SESSION": session}


def start_apply(spec: Path, out: Path, session: str) -> subprocess.Popen[bytes]:
    # Output to a file beside the spec, not a pipe nobody reads while waiting (a full pipe blocks the child).
    log = open(spec.parent / "apply.log", "ab")  # noqa: SIM115 - the child holds it; closed when it exits
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "anyswe", "apply", str(spec), "--out", str(out)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=_env(session),
            start_new_session=True,  # signals go to the orchestrator's group, as a terminal or a scheduler does
        )
    finally:
        log.close()


def apply_output(spec: Path) -> str:
    path = spec.parent / "apply.log"
    return path.read_text(errors="replace") if path.is_file() else ""


def finish(spec: Path, out: Path, session: str, figures: Figures, limit: int = 4) -> None:
    """Apply again until the run is complete (exit 0), as a user would."""
    for _ in range(limit):
        r = subprocess.run(
            [sys.executable, "-m", "anyswe", "apply", str(spec), "--out", str(out)],
            capture_output=True,
            text=True,
            env=_env(session),
            timeout=900,
        )
        figures.applies += 1
        if r.returncode == 0:
            return
        figures.notes.append(f"re-apply exit {r.returncode}: {(r.stderr or r.stdout).strip()[-300:]}")


def sandboxes(provider: str, session: str, phase: str | None = None) -> list[str]:
    from anyswe.sandbox import get_provider

    async def listing() -> dict[str, dict[str, str] | None]:
        return await get_provider(provider).sandboxes()

    found = asyncio.run(listing())
    return sorted(
        name
        for name, labels in found.items()
        if (labels or {}).get("anyswe.session") == session and (phase is None or labels.get("anyswe.phase") == phase)
    )


def gc(session: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "anyswe", "gc", "--session", session], capture_output=True, env=_env(session), check=True
    )


# -- faults ---------------------------------------------------------------------------------------

#: The environment variable that fixes the seed of every random choice here (when a fault strikes).
SEED_VAR = "ANYSWE_FAULT_SEED"


def fault_seed() -> int:
    """The seed from ANYSWE_FAULT_SEED, or a fresh one: whoever picks it prints it, so a failing run
    can be repeated exactly (``ANYSWE_FAULT_SEED=<seed>``)."""
    value = os.environ.get(SEED_VAR, "").strip()
    return int(value) if value else random.SystemRandom().randrange(2**32)


def wait_for(predicate: Callable[[], str | None], proc: subprocess.Popen[bytes], timeout: float = 180) -> str | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        found = predicate()
        if found:
            return found
        time.sleep(0.2)
    return None


def strike(provider: str, name: str, how: str) -> None:
    """``kill`` (SIGKILL, as the OOM killer or a preemption) or ``stop`` (as an operator) one sandbox."""
    if provider == "docker":
        subprocess.run(["docker", how, name], capture_output=True, check=False)
    else:
        force = ["--force"] if how == "kill" else []
        subprocess.run(["apptainer", "instance", "stop", *force, name], capture_output=True, check=False)


def restart_dockerd() -> None:
    pid = subprocess.run(["pidof", "dockerd"], capture_output=True, text=True).stdout.split()
    for p in pid:
        os.kill(int(p), signal.SIGTERM)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and subprocess.run(["pidof", "dockerd"], capture_output=True).returncode == 0:
        time.sleep(0.2)
    subprocess.run(["bash", str(REPO / "scripts" / "provision.sh"), "docker"], capture_output=True, check=True)


# -- checking -------------------------------------------------------------------------------------


def check(out: Path, provider: str, session: str, figures: Figures) -> Figures:
    from anyswe.results.store import read_results

    planned = [t["key"] for t in json.loads((out / "plan.json").read_text())["tasks"]]
    rows = read_results(out / "results.jsonl")
    final: dict[str, list[bool]] = {}
    for r in rows:
        if not r.retryable:
            final.setdefault(r.key, []).append(r.resolved)
            if not r.resolved:
                figures.notes.append(f"{r.instance_id}: {r.error_kind} {(r.error or '')[:200]}")
    figures.tasks = len(planned)
    figures.lost = sum(1 for k in planned if k not in final)
    figures.duplicated = sum(1 for v in final.values() if len(v) > 1)
    # The oracle resolves every task: a final row that is not resolved is a wrong verdict.
    figures.wrong = sum(1 for v in final.values() for resolved in v if not resolved)
    figures.orphans_after_apply = len(sandboxes(provider, session))
    gc(session)
    figures.orphans_after_gc = len(sandboxes(provider, session))
    return figures


# -- scenarios ------------------------------------------------------------------------------------


def _workspace(tmp: Path, provider: str, instances: list[str]) -> tuple[Path, Path, str]:
    tmp.mkdir(parents=True, exist_ok=True)
    spec = tmp / "spec.yaml"
    spec.write_text(SPEC.format(provider=provider, instances=", ".join(instances)))
    return spec, tmp / "run", f"faults-{uuid.uuid4().hex[:8]}"


def sandbox_faults(tmp: Path, provider: str, instances: list[str] = INSTANCES) -> Figures:
    """Kill and stop agent and grading sandboxes of a running apply, one after another."""
    spec, out, session = _workspace(tmp, provider, instances)
    figures = Figures("sandbox kill/stop in agent and grading phases", provider)
    proc = start_apply(spec, out, session)
    try:
        for phase, how in (("agent", "kill"), ("grading", "stop"), ("agent", "stop"), ("grading", "kill")):
            target = wait_for(lambda phase=phase: next(iter(sandboxes(provider, session, phase)), None), proc)
            if target is None:
                figures.missed += 1
                continue
            time.sleep(1)  # well into the phase
            strike(provider, target, how)
            figures.faults += 1
        if proc.wait(timeout=900) not in (0, 1):
            figures.notes.append(f"apply exit {proc.returncode}: {apply_output(spec)[-1500:]}")
    finally:
        proc.kill()
    finish(spec, out, session, figures)
    return check(out, provider, session, figures)


def orchestrator_signal(tmp: Path, provider: str, sig: signal.Signals, rng: random.Random) -> Figures:
    """Send ``sig`` to the orchestrator's process group at a random moment, then apply again."""
    spec, out, session = _workspace(tmp, provider, INSTANCES[:3])
    figures = Figures(f"orchestrator {sig.name} at a random point", provider)
    proc = start_apply(spec, out, session)
    try:
        time.sleep(rng.uniform(2, 25))
        if proc.poll() is None:
            os.killpg(proc.pid, sig)
            figures.faults += 1
        else:
            figures.missed += 1
        proc.wait(timeout=300)
    finally:
        proc.kill()
    finish(spec, out, session, figures)
    return check(out, provider, session, figures)


def dockerd_restart(tmp: Path) -> Figures:
    """Restart the docker daemon while tasks run (every container dies with it)."""
    spec, out, session = _workspace(tmp, "docker", INSTANCES[:3])
    figures = Figures("dockerd restarted mid-run", "docker")
    proc = start_apply(spec, out, session)
    try:
        if wait_for(lambda: next(iter(sandboxes("docker", session, "agent")), None), proc):
            time.sleep(1)
            restart_dockerd()
            figures.faults += 1
        else:
            figures.missed += 1
        proc.wait(timeout=900)
    finally:
        proc.kill()
    finish(spec, out, session, figures)
    return check(out, "docker", session, figures)


def full_disk(tmp: Path, provider: str = "docker") -> Figures:
    """The run directory on a disk that fills up mid-run; space comes back before the next apply."""
    spec, _, session = _workspace(tmp, provider, INSTANCES[:3])
    disk = tmp / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96k", "tmpfs", str(disk)], check=True)
    out = disk / "run"
    figures = Figures("run directory's disk full mid-run", provider)
    try:
        proc = start_apply(spec, out, session)
        proc.wait(timeout=900)
        output = apply_output(spec).encode()
        if b"No space left on device" in output:
            figures.faults += 1
        else:
            figures.missed += 1
            figures.notes.append(f"the disk did not fill: exit {proc.returncode}")
        if b"Traceback" in output:
            figures.notes.append("a traceback on a full disk: " + output.decode(errors="replace")[-400:])
            figures.wrong += 1
        subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True)
        finish(spec, out, session, figures)
        return check(out, provider, session, figures)
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


# -- the report -----------------------------------------------------------------------------------


def table(results: list[Figures]) -> str:
    head = (
        "| scenario | provider | faults injected | missed | tasks | wrong verdicts | lost | duplicated "
        "| orphans after apply / gc | applies |"
    )
    lines = [head, "|" + "---|" * 10]
    for f in results:
        lines.append(
            f"| {f.scenario} | {f.provider} | {f.faults} | {f.missed} | {f.tasks} | {f.wrong} | {f.lost} | "
            f"{f.duplicated} | {f.orphans_after_apply} / {f.orphans_after_gc} | {f.applies} |"
        )
    total = Figures("total", "")
    for f in results:
        for name in (
            "faults",
            "missed",
            "tasks",
            "wrong",
            "lost",
            "duplicated",
            "orphans_after_apply",
            "orphans_after_gc",
        ):
            setattr(total, name, getattr(total, name) + getattr(f, name))
    lines.append(
        f"| **total** | | {total.faults} | {total.missed} | {total.tasks} | {total.wrong} | {total.lost} | "
        f"{total.duplicated} | {total.orphans_after_apply} / {total.orphans_after_gc} | |"
    )
    return "\n".join(lines)


def run_suite(tmp: Path, rounds: int, providers: list[str], seed: int) -> list[Figures]:
    rng = random.Random(seed)
    results = []
    for r in range(rounds):
        for provider in providers:
            results.append(sandbox_faults(tmp / f"r{r}-{provider}-sandbox", provider))
            for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT):
                results.append(orchestrator_signal(tmp / f"r{r}-{provider}-{sig.name}", provider, sig, rng))
        if "docker" in providers:
            results.append(dockerd_restart(tmp / f"r{r}-dockerd"))
            results.append(full_disk(tmp / f"r{r}-disk"))
    return results


def main() -> None:
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--providers", nargs="+", default=["docker", "apptainer"])
    parser.add_argument("--seed", type=int, default=None, help=f"default: ${SEED_VAR}, else a fresh one")
    parser.add_argument("--write", action="store_true", help="Write the figures into docs/reliability.md.")
    args = parser.parse_args()
    if args.seed is None:
        args.seed = fault_seed()
    print(f"fault seed {args.seed} (repeat: --seed {args.seed})", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(prefix="anyswe-faults-") as tmp:
        results = run_suite(Path(tmp), args.rounds, args.providers, args.seed)
    report = table(results)
    print(report)
    for f in results:
        for note in f.notes:
            print(f"  {f.scenario} [{f.provider}]: {note}")
    if args.write:
        doc = REPO / "docs" / "reliability.md"
        text = doc.read_text()
        begin, end = "<!-- figures:begin -->", "<!-- figures:end -->"
        stamp = (
            f"`python tests/e2e/faultkit.py --rounds {args.rounds} --seed {args.seed}`, {time.strftime('%Y-%m-%d')}:"
        )
        doc.write_text(text[: text.index(begin) + len(begin)] + f"\n{stamp}\n\n{report}\n" + text[text.index(end) :])
    sys.exit(0 if all(f.ok for f in results) else 1)


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    main()
