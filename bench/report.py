"""Benchmark: the HTML report of a large run (issue 22: usable at 10,000 tasks).

Writes a synthetic run directory of ``--tasks`` tasks (each with a patch, a test log of a few KB and
a trajectory of ``--steps`` steps in the gateway's contract), then prints the report's size, the
time to render it, and the time headless Chromium takes to load it and run its script (the page
opens as a table; a task is drawn when opened). The baseline, measured in the same run, is the same
for a tenth of the tasks. Never asserts: machines are shared and noisy.

    uv run python bench/report.py [--tasks 10000] [--steps 8]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from anyswe.results.report import write_report
from anyswe.results.schema import TaskResult

PATCH = "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1,2 +1,2 @@\n-    return a - b\n+    return a + b\n"
LOG = "".join(f"PASSED tests/test_x.py::test_{n}\n" for n in range(80))


def _step(n: int) -> str:
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "fix it " * 40}] + [{"role": "tool", "content": "x" * 300}] * n,
    }
    return json.dumps(
        {
            "schema_version": 1,
            "index": n,
            "time": 1.0 + n,
            "latency_s": 0.8,
            "protocol": "openai-chat",
            "model": "m",
            "conversation_hash": f"{n:064x}",
            "prior_messages": n,
            "messages": [{"role": "tool", "text": "output line\n" * 30}],
            "reply": {"text": "", "tool_calls": [{"id": f"c{n}", "name": "bash", "arguments": {"command": "ls -la"}}]},
            "usage": {"input_tokens": 2000 + 300 * n, "output_tokens": 60},
            "request": body,
        }
    )


def make_run(root: Path, tasks: int, steps: int) -> Path:
    run = root / f"run-{tasks}"
    (run / "tasks").mkdir(parents=True)
    trajectory = "".join(_step(n) + "\n" for n in range(steps))
    lines = []
    for i in range(tasks):
        provider = ("docker", "apptainer")[i % 2]
        key = f"{i:016x}__inst-{i // 2}"
        d = run / "tasks" / key
        d.mkdir()
        (d / "patch.diff").write_text(PATCH)
        (d / "test_output.txt").write_text(LOG)
        (d / "trajectory.jsonl").write_text(trajectory)
        row = {
            "key": key,
            "cell": f"agent.model.{provider}",
            "agent": "agent",
            "model": "model",
            "provider": provider,
            "instance_id": f"inst-{i // 2}",
            "resolved": (i * 7919) % 3 != 0,
            "patch_exists": True,
            "time_agent": 60.0,
            "time_total": 80.0,
            "trajectory_path": f"tasks/{key}/trajectory.jsonl",
        }
        lines.append(TaskResult.model_validate(row).model_dump_json())
    (run / "results.jsonl").write_text("\n".join(lines) + "\n")
    return run


def measure(root: Path, tasks: int, steps: int, chromium: str | None) -> dict[str, float]:
    run = make_run(root, tasks, steps)
    start = time.perf_counter()
    out = write_report(run, run / "report.html")
    figures = {"tasks": tasks, "render_s": time.perf_counter() - start, "size_mb": out.stat().st_size / 1e6}
    if chromium:
        flags = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            f"--user-data-dir={tempfile.mkdtemp()}",
        ]
        start = time.perf_counter()
        dom = subprocess.run(
            [chromium, *flags, "--dump-dom", out.as_uri()], capture_output=True, text=True, timeout=600
        )
        figures["open_s"] = time.perf_counter() - start
        figures["ready"] = float('data-ready="1"' in dom.stdout)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()
    chromium = shutil.which("chromium")
    with tempfile.TemporaryDirectory() as tmp:
        base = measure(Path(tmp), max(2, args.tasks // 10), args.steps, chromium)
        big = measure(Path(tmp), args.tasks, args.steps, chromium)
    for f in (base, big):
        print(json.dumps({k: round(v, 3) for k, v in f.items()}))
    ratio = {k: round(big[k] / base[k], 2) for k in ("render_s", "size_mb", "open_s") if k in big and base.get(k)}
    print(f"ratios at {args.tasks} tasks against {base['tasks']:.0f}: {ratio}")


if __name__ == "__main__":
    main()
