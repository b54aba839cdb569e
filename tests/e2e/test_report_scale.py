"""A report of a run larger than INLINE_TASKS is a page and a folder of task files, and a task opened
from it is drawn from its file, in headless Chromium (issue 22, item 4: usable at 10,000 tasks;
bench/report.py measures size and load time). The run directory is synthetic: rows as TaskResult
validates them, with a patch, a log and a trajectory in the gateway's contract per task; nothing
here needs a container, only Chromium (provisioned with the container tier)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from anyswe.results.report import write_report
from anyswe.results.report_tasks import CHUNK, INLINE_TASKS
from anyswe.results.schema import TaskResult

STEP = {
    "schema_version": 1,
    "protocol": "openai-chat",
    "model": "m",
    "conversation_hash": "0" * 64,
    "messages": [{"role": "user", "text": "fix it"}],
    "reply": {
        "reasoning": "Look at the tree before changing anything.",
        "tool_calls": [{"id": "c1", "name": "bash", "arguments": {"command": "ls -la /testbed"}}],
        "stop": "tool",
    },
    "usage": {"input_tokens": 1200, "output_tokens": 30},
    "latency_s": 0.5,
}


def _run(root: Path, tasks: int) -> Path:
    lines = []
    for i in range(tasks):
        key = f"{i:016x}__inst-{i // 2}"
        d = root / "tasks" / key
        d.mkdir(parents=True)
        (d / "patch.diff").write_text(f"diff --git a/x.py b/x.py\n+line {i}\n")
        (d / "trajectory.jsonl").write_text(json.dumps(STEP) + "\n")
        row = {"key": key, "cell": ("a.m.docker", "a.m.apptainer")[i % 2], "agent": "a", "model": "m"}
        row |= {"provider": ("docker", "apptainer")[i % 2], "instance_id": f"inst-{i // 2}", "resolved": i % 3 == 0}
        lines.append(
            TaskResult.model_validate(row | {"trajectory_path": f"tasks/{key}/trajectory.jsonl"}).model_dump_json()
        )
    (root / "results.jsonl").write_text("\n".join(lines) + "\n")
    return root


def test_a_large_report_loads_a_task_from_its_file_when_opened(tmp_path: Path, browse: Callable[..., str]) -> None:
    tasks = INLINE_TASKS + 1
    run = _run(tmp_path / "run", tasks)
    out = write_report(run, tmp_path / "report.html")
    files = sorted((tmp_path / "report_tasks").iterdir())
    assert len(files) == -(-tasks // CHUNK)
    assert "line 1\\n" not in out.read_text() and "line 1\\n" in files[0].read_text()  # details not in the page
    # The table is drawn a page at a time from its rows (thousands of HTML rows were most of the first screen).
    first = browse(out.as_uri())
    assert first.count('<tr class="task"') == 500 and f"show 500 more (500 of {tasks} shown)" in first
    last = f"{tasks - 1:016x}__inst-{(tasks - 1) // 2}"  # in the last file
    dom = browse(f"{out.as_uri()}#task={last}&step=0")
    opened = dom[dom.index(f'data-key="{last}"') :]
    assert 'data-drawn="1"' in opened and f"line {tasks - 1}" in opened and "ls -la /testbed" in opened
    # The model's reasoning, folded under its reply.
    assert 'class="long reasoning"' in opened and "Look at the tree before changing anything." in opened
    assert dom.count('data-drawn="1"') == 1
    # A small run keeps everything in the page.
    small = write_report(_run(tmp_path / "small", 3), tmp_path / "small.html")
    assert not (tmp_path / "small_tasks").exists() and "line 2\\n" in small.read_text()
