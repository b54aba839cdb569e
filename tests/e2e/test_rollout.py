"""``anyswe.rollout()``: one task as one RL sample from an instance and agent, model and provider blocks,
on both runtimes, with no spec and no run directory, or recorded into one as ``anyswe apply`` would."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import anyswe
from anyswe.results.store import read_results

pytestmark = [pytest.mark.containers, pytest.mark.usefixtures("runtimes")]

MINI = {"type": "mini-swe-agent", "step_limit": 20}
SCRIPTED = {"api": "scripted", "protocol": "openai-chat"}


@pytest.mark.parametrize("provider", ["docker", "apptainer"])
def test_a_model_rollout_returns_reward_trajectory_and_usage(provider: str) -> None:
    r = anyswe.rollout("demo__calc-1", dataset="demo-swebench", agent=MINI, model=SCRIPTED, provider=provider)
    assert (r.reward, r.resolved, r.mask_sample, r.mask_reason, r.error_kind) == (1.0, True, False, None, None)
    assert r.exit_reason == "submitted" and r.patch.startswith("diff --git a/calc.py")
    assert r.tests_status["FAIL_TO_PASS"]["success"] and not r.tests_status["FAIL_TO_PASS"]["failure"]
    # The scripted oracle's two calls: the fix, then the submission; usage counted by the gateway.
    assert len(r.trajectory) == r.usage.model_calls == 2 and r.usage.input_tokens > 0
    assert r.trajectory[0].reply is not None and r.trajectory[0].reply.tool_calls
    assert r.trajectory[0].tool_results, "the tool result the agent saw next"
    assert r.timings["time_agent"] and r.timings["time_grading"] and r.result.provider_type == provider
    assert r.run_dir is None and "test_output.txt" in r.files


def test_recorded_rollouts_read_as_a_run(tmp_path: Path) -> None:
    run = tmp_path / "rollouts"
    first = anyswe.rollout(
        "demo__inventory-4", dataset="demo", agent={"type": "gold"}, provider="apptainer", run_dir=run
    )
    again = anyswe.rollout(
        "demo__inventory-4", dataset="demo", agent={"type": "gold"}, provider="apptainer", run_dir=run
    )
    assert first.resolved and again.resolved and first.run_dir == run
    rows = read_results(run / "results.jsonl")
    assert [row.attempt for row in rows] == [1, 2] and rows[0].key == rows[1].key == first.result.key
    assert rows[1] == again.result
    assert (run / "tasks" / first.result.key / "patch.diff").read_text() == first.patch
    shown = subprocess.run([sys.executable, "-m", "anyswe", "results", str(run)], capture_output=True, text=True)
    assert shown.returncode == 0 and "gold" in shown.stdout, shown.stdout + shown.stderr


def test_a_row_runs_without_a_dataset_loaded() -> None:
    """A row (as a trainer's data loader has it) needs only its dataset's name for its harness and images."""
    row = anyswe.load_dataset("demo").by_id()["demo__stack-8"].model_dump()
    r = anyswe.rollout(row, dataset="demo", agent={"type": "noop"}, provider="docker")
    assert (r.reward, r.resolved, r.mask_sample, r.patch) == (0.0, False, False, "")


@pytest.mark.parametrize(
    ("blocks", "words"),
    [
        ({"agent": {"type": "mini-swe-agent", "step_limt": 3}, "model": SCRIPTED}, "agent.step_limt"),
        ({"agent": {"step_limit": 3}}, "agent needs a `type`"),
        ({"agent": MINI, "model": {"api": "nope"}}, "model.api"),
        ({"agent": {"type": "gold"}, "provider": {"type": "docker", "memory": []}}, "provider.memory"),
    ],
)
def test_bad_blocks_name_the_field(blocks: dict[str, object], words: str) -> None:
    with pytest.raises(anyswe.SpecError, match=words):
        anyswe.rollout("demo__calc-1", dataset="demo", **blocks)


def test_a_group_is_one_instances_samples_run_at_once() -> None:
    async def go() -> list[anyswe.Rollout]:
        async with anyswe.Rollouts(concurrency=2) as session:
            return await session.group("demo__calc-1", 3, dataset="demo", agent={"type": "gold"}, provider="docker")

    group = asyncio.run(go())
    assert [r.result.sample for r in group] == [0, 1, 2] and len({r.result.key for r in group}) == 3
    assert all(r.resolved and not r.mask_sample for r in group)  # none masked: the group is as it ran


def test_a_lone_surrogate_from_the_model_keeps_the_sample_and_its_report(tmp_path: Path) -> None:
    """Issue 31, item 4: the scripted model's first command holds a lone surrogate (JSON can say one),
    its second prints one's bytes. The rollout is recorded, the trajectory holds both steps as UTF-8, the
    report reads it and a replay serves it again; hand-corrupted lines (bytes that are not UTF-8, a line
    cut short) are errors in the report naming file and line, never a traceback."""
    from anyswe.gateway.replay import ReplayModel

    script = tmp_path / "script"
    script.mkdir()
    steps = ["echo 'lone \ud800 here'", "printf 'raw \\355\\240\\200 bytes\\n'"]
    (script / "demo__calc-1.json").write_text(json.dumps({"steps": steps}))
    run = tmp_path / "run"
    model = {**SCRIPTED, "script": str(script)}
    r = anyswe.rollout("demo__calc-1", dataset="demo", agent=MINI, model=model, provider="docker", run_dir=run)
    assert (r.error_kind, r.exit_reason, r.trajectory_errors, len(r.trajectory)) == (None, "submitted", [], 3)
    first, second = (s.reply.tool_calls[0].arguments["command"] for s in r.trajectory[:2] if s.reply)
    assert (first, second) == tuple(steps)
    # mini-swe-agent could not give the first command to bash (as its own environments answer it);
    # the second printed the bytes, which the agent read as text.
    assert "surrogates not allowed" in r.trajectory[0].tool_results[0].text
    assert "raw \ufffd\ufffd\ufffd bytes" in r.trajectory[1].tool_results[0].text
    (row,) = read_results(run / "results.jsonl")
    assert row == r.result
    traj = run / str(row.trajectory_path)
    traj.read_bytes().decode()  # UTF-8 throughout: the surrogate is kept as its JSON escape
    assert len(ReplayModel.load(traj).steps) == 3
    # Replayed, the recorded replies (the surrogate among them) reach the agent again and it runs the
    # same commands: each call's conversation matches the recording, or the replay would end in error.
    replay = {**SCRIPTED, "replay": {"run": str(run)}}
    again = anyswe.rollout("demo__calc-1", dataset="demo", agent=MINI, model=replay, provider="docker")
    assert (again.error_kind, again.exit_reason, again.trajectory_errors) == (None, "submitted", [])
    assert [s.reply.tool_calls[0].arguments["command"] for s in again.trajectory[:2] if s.reply] == steps

    report = subprocess.run(
        [sys.executable, "-m", "anyswe", "report", str(run), "-o", str(tmp_path / "r.html")],
        capture_output=True,
        text=True,
    )
    assert report.returncode == 0 and not report.stderr, report.stderr
    page = (tmp_path / "r.html").read_text()
    assert "lone \\\\ud800 here" in page and "could not be read" not in page  # the step, as JSON in the page

    lines = traj.read_bytes().splitlines(keepends=True)
    traj.write_bytes(lines[0] + lines[1][:40] + b"\xff\xfe" + lines[1][40:] + lines[2][:60] + b"\n" + lines[2][:30])
    report = subprocess.run(
        [sys.executable, "-m", "anyswe", "report", str(run), "-o", str(tmp_path / "r.html")],
        capture_output=True,
        text=True,
    )
    assert report.returncode == 0 and "Traceback" not in report.stderr, report.stderr
    page = (tmp_path / "r.html").read_text()
    for where in (":2: not UTF-8 (byte 0xff at column 41)", ":3: not JSON", ":4: a line cut short"):
        assert f"trajectory.jsonl{where}" in page and f"trajectory.jsonl{where}" in report.stderr, where
    assert "lone \\\\ud800 here" in page  # the line that could be read is still shown


def test_mini_swe_agents_transcript_is_kept_within_its_cap() -> None:
    """Issue 31, item 7: mini-swe-agent keeps each command's whole output in its transcript (two steps
    of 16 MiB made 35.7 MB on the host). Two steps printing 2 MB each, through the gateway and a real
    sandbox, give a transcript within the agent's cap: still JSON, every message there, each long
    output its head and tail, and the cut recorded in the transcript and in the task's log."""
    script = {"steps": ["head -c 2000000 /dev/zero | tr '\\0' a; echo END", "head -c 2000000 /dev/zero | tr '\\0' b"]}
    cap = 256 * 1024
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "demo__calc-1.json").write_text(json.dumps(script))
        model = {**SCRIPTED, "script": tmp}
        agent = {**MINI, "transcript_bytes": cap}
        r = anyswe.rollout("demo__calc-1", dataset="demo", agent=agent, model=model, provider="docker")
    assert (r.error_kind, r.exit_reason) == (None, "submitted")
    text = r.files["agent-mini-swe-agent.traj.json"]
    assert len(text.encode()) <= cap
    transcript = json.loads(text)
    assert "over its 262144-byte cap" in transcript["info"]["anyswe_cut"]
    outputs = [m["extra"]["raw_output"] for m in transcript["messages"] if "raw_output" in m.get("extra", {})]
    assert len(outputs) == 2  # both long outputs, and the run's end after them: no message lost
    assert transcript["messages"][-1]["extra"]["exit_status"] == "Submitted"
    first = outputs[0]
    assert first.startswith("aaaa") and first.endswith("aaaaEND\n") and "characters cut here" in first
    assert "mini-swe-agent's transcript cut: the transcript was" in r.files["agent.log"]
