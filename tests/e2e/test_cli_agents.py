"""Claude Code, OpenClaw, Hermes, Codex, OpenCode, Pi, Gemini CLI and Cline (pinned releases, from their
bundles) inside the task containers, on docker and apptainer, through the model gateway with the
scripted model: they resolve the SWE-bench-shaped tasks, their transcripts and trajectories are kept,
their bundles are built once, the report shows their steps, their trajectories export as ATIF and
replay from it. (Turn caps, dead endpoints, budgets, an older base and translation:
test_cli_agent_edges.py.)"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest
from clikit import experiment

from anyswe.experiment import Experiment

pytestmark = pytest.mark.containers

AGENT_TYPES = {
    "claude": "claude-code",
    "openclaw": "openclaw",
    "hermes": "hermes",
    "codex": "codex",
    "opencode": "opencode",
    "pi": "pi",
    "gemini": "gemini-cli",
    "cline": "cline",
}
#: What each agent keeps as its transcript.
TRANSCRIPTS = {
    "claude": "agent-claude-code.jsonl",
    "openclaw": "agent-openclaw.json",
    "hermes": "agent-hermes.txt",
    "codex": "agent-codex.jsonl",
    "opencode": "agent-opencode.jsonl",
    "pi": "agent-pi.jsonl",
    "gemini": "agent-gemini-cli.jsonl",
    "cline": "agent-cline.jsonl",
}


@pytest.fixture(scope="module")
def agents_run(runtimes: None, tmp_path_factory: pytest.TempPathFactory) -> Experiment:
    exp = experiment(tmp_path_factory.mktemp("cli-agents"))
    summary = exp.run(progress=False)
    assert summary.ran == 34 and summary.errors == 0, summary
    return exp


def test_resolve_swebench_shaped_tasks_on_both_runtimes(agents_run: Experiment) -> None:
    df = agents_run.results()
    assert {(a, p) for a, p in zip(df["agent"], df["provider"], strict=True)} == {
        (agent, provider) for agent in AGENT_TYPES for provider in ("docker", "apptainer")
    }
    assert df["resolved"].all() and not df["mask_sample"].any(), df.filter(~pl.col("resolved"))
    assert set(df["exit_reason"]) == {"submitted"}
    # The fix, then the final answer: two calls and two turns, counted by the gateway and the agent.
    assert (df["model_calls"] == 2).all() and (df["turns"] == 2).all() and (df["input_tokens"] > 0).all()


def test_transcripts_and_trajectories_are_kept_and_patches_are_the_fix_alone(agents_run: Experiment) -> None:
    for row in agents_run.results().iter_rows(named=True):
        task_dir = agents_run.run_dir / "tasks" / row["key"]
        transcript = (task_dir / TRANSCRIPTS[row["agent"]]).read_text()
        if row["agent"] == "claude":
            events = [json.loads(line) for line in transcript.splitlines()]
            assert events[0]["type"] == "system" and events[-1]["type"] == "result", events[-1]
        elif row["agent"] == "codex":
            events = [json.loads(line) for line in transcript.splitlines()]
            assert events[0]["type"] == "thread.started" and events[-1]["type"] == "turn.completed", events[-1]
            ran = [
                e["item"] for e in events if e["type"] == "item.completed" and e["item"]["type"] == "command_execution"
            ]
            assert len(ran) == 1 and ran[0]["exit_code"] == 0, ran  # the oracle's fix, run by Codex's shell tool
        elif row["agent"] == "opencode":
            events = [json.loads(line) for line in transcript.splitlines()]
            assert events[-1]["type"] == "step_finish" and events[-1]["part"]["reason"] == "stop", events[-1]
            ran = [e["part"]["state"] for e in events if e["type"] == "tool_use"]
            assert len(ran) == 1 and ran[0]["status"] == "completed" and ran[0]["metadata"]["exit"] == 0, ran
        elif row["agent"] == "pi":
            events = [json.loads(line) for line in transcript.splitlines()]
            assert events[0]["type"] == "session" and events[-1]["type"] == "agent_end", events[-1]
            ran = [e for e in events if e["type"] == "tool_execution_end"]
            assert len(ran) == 1 and ran[0]["toolName"] == "bash" and not ran[0]["isError"], ran
        elif row["agent"] == "gemini":
            events = [json.loads(line) for line in transcript.splitlines()]
            assert events[0]["type"] == "init" and events[-1]["type"] == "result", events[-1]
            assert events[-1]["status"] == "success" and events[-1]["stats"]["tool_calls"] == 1, events[-1]
            ran = [e for e in events if e["type"] == "tool_result"]
            assert len(ran) == 1 and ran[0]["status"] == "success", ran
        elif row["agent"] == "cline":
            events = [json.loads(line) for line in transcript.splitlines()]
            assert events[-1]["type"] == "run_result" and events[-1]["finishReason"] == "completed", events[-1]
            assert events[-1]["iterations"] == 2 and "providers.json" not in transcript, events[-1]
        elif row["agent"] == "openclaw":
            assert '"status": "ok"' in transcript or '"status":"ok"' in transcript, transcript[-500:]
        else:
            assert "I have made the change" in transcript, transcript[-500:]
        calls = [json.loads(line) for line in (agents_run.run_dir / row["trajectory_path"]).read_text().splitlines()]
        protocol = {"scripted-chat": "openai-chat", "scripted-responses": "openai-responses"}.get(
            row["model"], "anthropic-messages"
        )
        if row["agent"] == "gemini":  # Gemini CLI speaks Google's protocol to any model
            protocol = "google-generate-content"
        assert {c["protocol"] for c in calls} == {protocol}
        # Nothing of the agent's own state (.claude, .openclaw, .hermes, its config) in the captured patch.
        assert row["model_patch"].startswith("diff --git"), row["model_patch"][:300]
        assert not any(
            s in row["model_patch"] for s in (".claude", ".openclaw", ".hermes", ".codex", "apiKey", "api_key")
        )


def test_bundles_are_built_once_and_reused(agents_run: Experiment) -> None:
    """The run above built (or found) each bundle; asking again builds nothing and gives the same directory."""
    from anyswe.agents import agent_class
    from anyswe.agents.bundles import ensure_bundle

    for agent_type in AGENT_TYPES.values():
        recipe = agent_class(agent_type).bundle  # type: ignore[attr-defined]
        first = ensure_bundle(recipe)
        stamp = (first / ".complete").stat().st_mtime_ns
        assert ensure_bundle(recipe) == first and (first / ".complete").stat().st_mtime_ns == stamp
        assert first.name == f"{recipe.name}-{recipe.key()}"  # content-addressed: the lock's hash
    # Hermes's packages come compiled: read-only in the sandbox, it could not write a .pyc of its own.
    site = ensure_bundle(agent_class("hermes").bundle) / "python" / "lib" / "python3.11" / "site-packages"  # type: ignore[attr-defined]
    assert (site / "hermes_cli" / "__pycache__" / "main.cpython-311.pyc").is_file()


def test_the_report_shows_each_tasks_trajectory(agents_run: Experiment, browse: Callable[..., str]) -> None:
    """Issue 22, item 4: a task opened (``#task=KEY&step=0``) in headless Chromium shows its steps,
    with the tool call as a call, the tool result the agent saw, tokens per step, the phase bars,
    the highlighted patch and the tests."""
    from anyswe.results.report import write_report

    out = write_report(agents_run.run_dir, agents_run.run_dir / "report.html")
    row = next(r for r in agents_run.results().iter_rows(named=True) if r["agent"] == "claude")
    dom = browse(f"{out.as_uri()}#task={row['key']}&step=0", screenshot="report-trajectory")
    assert 'data-ready="1"' in dom
    opened = dom[dom.index(f'data-key="{row["key"]}"') :]
    assert "trajectory (2 steps)" in opened and "step 1 · " in opened and " in / " in opened
    # The link expanded the first step, and only it.
    assert '<details class="step" data-step="0" open="">' in opened
    assert '<details class="step" data-step="1" open="">' not in opened
    assert 'class="call"' in opened and "tool result" in opened  # the fix as a tool call, then its output
    assert 'class="ph ph2"' in opened and 'class="add"' in opened and "FAIL_TO_PASS" in opened
    # Closed tasks are not drawn: the page stays a table however many tasks it holds.
    assert dom.count('data-drawn="1"') == 1


def test_every_agents_trajectory_exports_as_atif_and_the_report_links_it(agents_run: Experiment) -> None:
    """Issue 34, item 4: each task's trajectory as ATIF v1.8, valid by the ``atif`` package's models
    (Harbor's format), one agent step per model call with its tool call, and the observation the
    agent then saw tied to that call."""
    from atif import Trajectory

    import anyswe
    from anyswe.results.report import render_report

    paths = anyswe.export_atif(agents_run.run_dir)
    rows = {r["key"]: r for r in agents_run.results().iter_rows(named=True)}
    assert sorted(p.stem for p in paths) == sorted(rows)
    for path in paths:
        row = rows[path.stem]
        doc = Trajectory.model_validate_json(path.read_text())
        assert doc.schema_version == "ATIF-v1.8" and doc.agent.name == AGENT_TYPES[row["agent"]], doc.agent
        assert doc.agent.version and doc.agent.tool_definitions, doc.agent
        agent_steps = [s for s in doc.steps if s.source == "agent"]
        assert len(agent_steps) == row["model_calls"] == 2
        fix, done = agent_steps
        assert (
            fix.tool_calls is not None
            and len(fix.tool_calls) == 1
            and "git apply" in json.dumps(fix.tool_calls[0].arguments)
        )
        assert (
            fix.observation is not None and fix.observation.results[0].source_call_id == fix.tool_calls[0].tool_call_id
        )
        assert done.tool_calls is None and done.message and doc.steps[0].source in ("system", "user")
        assert doc.final_metrics is not None and doc.final_metrics.total_prompt_tokens == sum(
            (s.metrics.prompt_tokens or 0) for s in agent_steps if s.metrics
        )
        assert doc.extra is not None and doc.extra["anyswe"]["resolved"] is True
    page = render_report(agents_run.run_dir)
    key = paths[0].stem
    assert f"atif/{key}.json" in page  # the task's detail links its export


def test_an_atif_export_replays_through_the_replay_model(agents_run: Experiment, tmp_path: Path) -> None:
    """Issue 34, item 4: ATIF trajectories replay (``replay: {atif: DIR}``): Pi's docker tasks, exported,
    served in order to Pi again on both runtimes, give the same patches and verdicts without a model."""
    import shutil

    import anyswe

    exported = anyswe.export_atif(agents_run.run_dir, tmp_path / "atif")
    recorded = {r["key"]: r for r in agents_run.results().iter_rows(named=True)}
    keep = tmp_path / "pi-docker"
    keep.mkdir()
    for path in exported:
        row = recorded[path.stem]
        if (row["agent"], row["provider"]) == ("pi", "docker"):
            shutil.copy(path, keep / f"{row['instance_id']}.json")  # <instance_id>.json: one per instance
    (tmp_path / "replay").mkdir()
    replay = experiment(
        tmp_path / "replay",
        f"models.again={{api: scripted, protocol: anthropic-messages, replay: {{atif: '{keep}'}}}}",
        "matrix={agents: [pi], models: [again], providers: [docker, apptainer]}",
    )
    summary = replay.run(progress=False)
    assert summary.ran == 4 and summary.errors == 0, summary
    patches = {
        r["instance_id"]: r["model_patch"] for r in recorded.values() if (r["agent"], r["provider"]) == ("pi", "docker")
    }
    for row in replay.results().iter_rows(named=True):
        assert row["resolved"] and row["exit_reason"] == "submitted" and row["model_calls"] == 2, row
        assert row["model_patch"] == patches[row["instance_id"]]
