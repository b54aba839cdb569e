"""Issue 31, item 5, in headless Chromium: a run whose patch and model text hold ``<!--<script>`` gives a
report whose script runs (a task opens, drawn from its JSON, the text shown as text), and a task file
linked to a file of the host is not in the page. Needs no container, only Chromium (provisioned with
the container tier); the rest of the untrusted reading: tests/unit/test_report_untrusted.py."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from anyswe.results.report import write_report
from anyswe.results.schema import TaskResult

HOSTILE = "<!--<script>"
#: Text that would run as the page's script if it ever left its JSON: it marks the body, which the test
#: looks for (an alert would not show in a dumped DOM). Escaping only ``</`` kept this one out, not HOSTILE.
INJECTED = "</script><script>document.body.dataset.injected='1'</script>"


def step(text: str) -> dict[str, object]:
    return {
        "schema_version": 1,
        "protocol": "openai-chat",
        "model": "m",
        "conversation_hash": "0" * 64,
        "messages": [{"role": "user", "text": f"fix it {HOSTILE} user"}],
        "reply": {
            "text": text,
            "reasoning": f"reasoning {HOSTILE} too",
            "tool_calls": [{"id": "c1", "name": "bash", "arguments": {"command": f"echo '{HOSTILE}'"}}],
            "stop": "tool",
        },
        "usage": {"input_tokens": 10, "output_tokens": 3},
        "latency_s": 0.5,
    }


def test_a_report_with_script_text_in_its_run_opens_a_task_and_follows_no_link(
    tmp_path: Path, browse: Callable[..., str]
) -> None:
    secret = tmp_path / "environ"
    secret.write_text("ANYSWE_SECRET_TOKEN=hunter2\n")  # what a link to /proc/self/environ would show
    run, lines = tmp_path / "run", []
    for n, iid in enumerate(("demo__calc-1", "demo__leap-5")):
        key = f"{n:016x}__{iid}"
        d = run / "tasks" / key
        d.mkdir(parents=True)
        (d / "patch.diff").write_text(f"diff --git a/calc.py b/calc.py\n+# {HOSTILE} in the patch {n}\n")
        (d / "trajectory.jsonl").write_text(json.dumps(step(f"model says {HOSTILE} {n} {INJECTED}")) + "\n")
        os.symlink(secret, d / "test_output.txt")
        row = {"key": key, "cell": "a.m.docker", "agent": "a", "model": "m", "provider": "docker", "instance_id": iid}
        row |= {"error": f"error {HOSTILE}", "trajectory_path": f"tasks/{key}/trajectory.jsonl"}
        lines.append(TaskResult.model_validate(row).model_dump_json())
    (run / "results.jsonl").write_text("\n".join(lines) + "\n")
    out = write_report(run, tmp_path / "report.html")
    page = out.read_text()
    assert HOSTILE not in page and INJECTED not in page and "hunter2" not in page

    last = f"{1:016x}__demo__leap-5"
    dom = browse(f"{out.as_uri()}#task={last}&step=0", screenshot="report-untrusted")
    assert 'data-ready="1"' in dom  # the page's own script ran
    assert "data-injected" not in dom  # and no script from the run's text did
    opened = dom[dom.index(f'data-key="{last}"') :]
    assert 'data-drawn="1"' in opened and dom.count('data-drawn="1"') == 1
    # The text is on the page as text (the DOM serialises it escaped), never as markup.
    shown = HOSTILE.replace("<", "&lt;").replace(">", "&gt;")
    closed = INJECTED.replace("<", "&lt;").replace(">", "&gt;")
    texts = (f"model says {shown} 1 {closed}", f"{shown} in the patch 1", f"reasoning {shown} too", f"error {shown}")
    for text in texts:
        assert text in opened, text
    assert "hunter2" not in dom and "test_output.txt not copied: it is a symbolic link" in opened
