"""Benchmark: ``anyswe serve`` with 64 rollouts at once: rollouts per minute and the server's memory.

The server runs the sleeping agent (bench/sleep_agent.py: it waits ``--seconds`` in its sandbox, as
an agent waits on its model, and changes nothing) on one provider; a client posts ``--rollouts``
Gym-shaped run requests, ``--concurrency`` at a time. The baseline, in the same run, is the same
server idle and then with one rollout at a time. Peak RSS (VmHWM) of the server process only (the
runtime's daemons and the containers are not the server). Prints figures; never asserts.

    uv run python bench/serve_load.py [--concurrency 64] [--rollouts 128] [--seconds 10] [--provider docker]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
#: The bearer token the bench's servers require (written to a 0600 file beside their config).
TOKEN = secrets.token_urlsafe(32)


def status_mb(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def start(work: Path, provider: str, concurrency: int, seconds: float) -> tuple[subprocess.Popen[str], str]:
    config = work / f"serve-{concurrency}.json"
    config.write_text(
        json.dumps(
            {
                "agent": {"type": "bench.sleep_agent:SleepAgent", "seconds": seconds},
                # Two sandboxes per rollout in flight: one being removed in the background while the next starts.
                "provider": {"type": provider, "concurrency": 2 * concurrency},
                "dataset": "demo",
                "concurrency": concurrency,
            }
        )
    )
    token = work / "serve.token"
    token.write_text(TOKEN)
    token.chmod(0o600)
    proc = subprocess.Popen(
        [sys.executable, "-m", "anyswe", "serve", "--config", str(config), "--port", "0", "--token-file", str(token)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "listening on" not in line:
        raise SystemExit(line + proc.stdout.read())
    return proc, line.split()[-1]


async def load(url: str, rollouts: int, concurrency: int) -> tuple[float, int]:
    import aiohttp

    from anyswe.datasets import load_dataset

    inst = load_dataset("demo").by_id()["demo__calc-1"]
    meta = {"instance_id": inst.instance_id, "dataset_name": "demo", "instance_dict": inst.model_dump(mode="json")}
    slots = asyncio.Semaphore(concurrency)
    errors = 0

    async def one(session: aiohttp.ClientSession, i: int) -> None:
        nonlocal errors
        body: dict[str, Any] = {"responses_create_params": {"input": [], "metadata": meta}, "_ng_rollout_id": f"b{i}"}
        async with slots, session.post(url + "/run", json=body) as resp:
            answer = await resp.json()
            errors += resp.status != 200 or answer.get("error_kind") is not None

    t = time.perf_counter()
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None), headers=auth) as session:
        await asyncio.gather(*(one(session, i) for i in range(rollouts)))
    return time.perf_counter() - t, errors


def measure(work: Path, provider: str, concurrency: int, rollouts: int, seconds: float) -> dict[str, float]:
    proc, url = start(work, provider, concurrency, seconds)
    try:
        idle = status_mb(proc.pid, "VmRSS")
        wall, errors = asyncio.run(load(url, rollouts, concurrency))
        return {"idle": idle, "peak": status_mb(proc.pid, "VmHWM"), "wall": wall, "errors": errors}
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=300)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--rollouts", type=int, default=128)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--provider", default="docker")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="anyswe-bench-serve-"))
    one = measure(work, args.provider, 1, 4, args.seconds)
    many = measure(work, args.provider, args.concurrency, args.rollouts, args.seconds)
    for name, m, n in (("1 at a time", one, 4), (f"{args.concurrency} at once", many, args.rollouts)):
        print(
            f"serve, {name:>12}: {n} rollouts of a {args.seconds:.0f}-s agent in {m['wall']:6.1f} s = "
            f"{60 * n / m['wall']:6.1f} rollouts/min; server RSS idle {m['idle']:4.0f} MB, peak {m['peak']:4.0f} MB; "
            f"{m['errors']:.0f} errors"
        )
    print(f"speed-up {many['wall'] and (args.rollouts / many['wall']) / (4 / one['wall']):.1f}x over one at a time")


if __name__ == "__main__":
    main()
