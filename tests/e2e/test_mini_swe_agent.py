"""mini-swe-agent end to end: through the model gateway, with the scripted model in each protocol,
on docker and apptainer; exit reasons for a step limit and a budget."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest

from anyswe.experiment import Experiment

pytestmark = pytest.mark.containers

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def agents_run(runtimes: None, tmp_path_factory: pytest.TempPathFactory) -> Experiment:
    exp = Experiment.load(
        REPO / "specs" / "agents_demo.yaml",
        overrides=["dataset.limit=2", "matrix.models=[scripted-chat, scripted-messages, scripted-responses]"],
        run_dir=tmp_path_factory.mktemp("agents-run"),
    )
    summary = exp.run(progress=False)
    assert summary.ran == 2 * 3 * 2 and summary.errors == 0, summary
    return exp


def test_every_protocol_and_runtime_resolves(agents_run: Experiment) -> None:
    df = agents_run.results()
    assert set(df["model"]) == {"scripted-chat", "scripted-messages", "scripted-responses"}
    assert set(df["provider"]) == {"docker", "apptainer"}
    assert df["resolved"].all() and not df["mask_sample"].any(), df.filter(~pl.col("resolved"))
    assert set(df["exit_reason"]) == {"submitted"}
    # Two model calls per task (apply the fix, submit), counted by the gateway.
    assert (df["model_calls"] == 2).all() and (df["input_tokens"] > 0).all() and (df["output_tokens"] > 0).all()


def test_trajectories_and_transcripts_are_kept(agents_run: Experiment) -> None:
    df = agents_run.results()
    for row in df.iter_rows(named=True):
        traj = agents_run.run_dir / row["trajectory_path"]
        calls = [json.loads(line) for line in traj.read_text().splitlines()]
        protocol = {"scripted-chat": "openai-chat", "scripted-messages": "anthropic-messages"}.get(
            row["model"], "openai-responses"
        )
        assert len(calls) == 2 and {c["protocol"] for c in calls} == {protocol}
        assert calls[0]["reply"]["tool_calls"] and calls[0]["usage"]["input_tokens"] > 0
        own = agents_run.run_dir / "tasks" / row["key"] / "agent-mini-swe-agent.traj.json"
        assert json.loads(own.read_text())["info"]["exit_status"] == "Submitted"


def test_the_report_shows_each_protocols_steps(agents_run: Experiment, browse: Callable[..., str]) -> None:
    """Issue 22, item 4: in headless Chromium, a task of each protocol opened at its second step shows
    the steps in the one neutral form: the tool call as a call, the tool result the agent saw."""
    from anyswe.results.report import write_report

    out = write_report(agents_run.run_dir, agents_run.run_dir / "report.html")
    rows = {r["model"]: r for r in agents_run.results().iter_rows(named=True)}
    for model, row in sorted(rows.items()):
        dom = browse(f"{out.as_uri()}#task={row['key']}&step=1", screenshot=f"report-mini-{model}")
        opened = dom[dom.index(f'data-key="{row["key"]}"') :]
        opened = opened[: opened.index("</details></td>", opened.index("test output"))]
        assert "trajectory (2 steps)" in opened and "step 2 · " in opened, model
        assert opened.count('class="call"') >= 2 and "tool result" in opened and "FAIL_TO_PASS" in opened, model
        # The link expanded the second step, and only it.
        assert '<details class="step" data-step="1" open="">' in opened, model
        assert '<details class="step" data-step="0" open="">' not in opened, model
        # The patch, highlighted: its file and an added line.
        assert 'class="file"' in opened and 'class="add"' in opened and "diff --git a/" in opened, model


def test_step_limit_and_budget_end_in_their_exit_reasons(runtimes: None, tmp_path: Path) -> None:
    exp = Experiment.load(
        REPO / "specs" / "agents_demo.yaml",
        overrides=[
            "dataset.limit=1",
            "matrix.models=[scripted-chat]",
            "matrix.providers=[docker]",
            "agents.limited={type: mini-swe-agent, step_limit: 1}",
            "models.budgeted={api: scripted, protocol: openai-chat, budget: {calls: 1}}",
            "matrix.include=[{agent: limited, model: scripted-chat, provider: docker}, "
            "{agent: mini, model: budgeted, provider: docker}]",
            "matrix.agents=[limited]",
        ],
        run_dir=tmp_path / "run",
    )
    exp.run(progress=False)
    rows = {(r["agent"], r["model"]): r for r in exp.results().iter_rows(named=True)}
    limited, budgeted = rows[("limited", "scripted-chat")], rows[("mini", "budgeted")]
    # Both applied the fix in their one call, then were stopped: a resolve after a forced stop is masked.
    assert (limited["exit_reason"], limited["resolved"], limited["mask_sample"]) == ("max_iterations", True, True)
    assert (budgeted["exit_reason"], budgeted["resolved"], budgeted["mask_sample"]) == ("budget", True, True)
    assert budgeted["model_calls"] == 1 and "budget exhausted" in budgeted["error"]


def replay_run(recorded: Path, run_dir: Path, *extra: str) -> Experiment:
    exp = Experiment.load(
        REPO / "specs" / "agents_demo.yaml",
        overrides=[
            "dataset.limit=2",
            f"models.replayed={{api: scripted, protocol: openai-chat, replay: {{run: '{recorded}', "
            "model: scripted-chat, provider: docker}}",
            "matrix.models=[replayed]",
            "matrix.providers=[apptainer]",
            *extra,
        ],
        run_dir=run_dir,
    )
    exp.run(progress=False)
    return exp


def test_a_docker_run_replayed_on_apptainer_gives_the_same_patches(agents_run: Experiment, tmp_path: Path) -> None:
    replayed = replay_run(agents_run.run_dir, tmp_path / "replayed").results()
    recorded = agents_run.results().filter((pl.col("model") == "scripted-chat") & (pl.col("provider") == "docker"))
    assert replayed.height == recorded.height == 2
    assert replayed["resolved"].all() and (replayed["model_calls"] == 2).all()
    assert dict(zip(replayed["instance_id"], replayed["model_patch"], strict=True)) == dict(
        zip(recorded["instance_id"], recorded["model_patch"], strict=True)
    )


def test_a_replay_that_diverges_or_has_nothing_recorded_is_that_tasks_error(
    agents_run: Experiment, tmp_path: Path
) -> None:
    import shutil

    tampered = tmp_path / "tampered"
    shutil.copytree(agents_run.run_dir, tampered)
    docker_chat = agents_run.results().filter((pl.col("model") == "scripted-chat") & (pl.col("provider") == "docker"))
    victim = docker_chat.row(0, named=True)
    traj = tampered / victim["trajectory_path"]
    calls = [json.loads(line) for line in traj.read_text().splitlines()]
    calls[1]["conversation_hash"] = "0" * 64
    traj.write_text("".join(json.dumps(c) + "\n" for c in calls))
    df = replay_run(tampered, tmp_path / "diverged").results()
    bad = df.filter(pl.col("instance_id") == victim["instance_id"]).row(0, named=True)
    assert bad["error_kind"] == "agent" and "diverged at call 2" in bad["error"] and not bad["mask_sample"]
    good = df.filter(pl.col("instance_id") != victim["instance_id"]).row(0, named=True)
    assert good["resolved"] and good["error_kind"] is None
    # Nothing recorded for another model name: the task says so; the run goes on.
    df = replay_run(agents_run.run_dir, tmp_path / "missing", "models.replayed.replay.model=nope").results()
    assert df.height == 2 and (df["error_kind"] == "agent").all()
    assert df["error"].str.contains("has no recorded calls of mini x nope").all()


def test_misbehaving_models_end_in_the_right_exit_reason(runtimes: None, tmp_path: Path) -> None:
    """Each misbehaving variant of the scripted model, through mini-swe-agent, on docker."""
    variants = {
        "flaky": ("submitted", True, False),  # a 500, retried by the client, then success
        "rate_limited": ("submitted", True, False),  # a 429 with Retry-After, then success
        "never_submits": ("max_iterations", False, False),  # stopped at its step limit: counts
        "malformed": ("error", False, False),  # calls a tool it does not have, until the agent gives up
        "context_window": ("context_window", False, False),
        "slow": ("timeout", False, True),  # the host's agent timeout: masked
    }
    overrides = [
        "dataset.limit=1",
        "matrix.providers=[docker]",
        "agents.mini.step_limit=3",
        "timeouts.agent=30",
        "concurrency=6",  # all at once: the slow one's 30 s are the test's, not added to the others'
        f"matrix.models=[{', '.join(variants)}]",
    ]
    for name in variants:
        overrides.append(f"models.{name}={{api: scripted, protocol: openai-chat, misbehave: {name}, delay: 90}}")
    exp = Experiment.load(REPO / "specs" / "agents_demo.yaml", overrides=overrides, run_dir=tmp_path / "run")
    summary = exp.run(progress=False)
    assert summary.ran == len(variants)
    got = {r["model"]: (r["exit_reason"], r["resolved"], r["mask_sample"]) for r in exp.results().iter_rows(named=True)}
    assert got == variants


def test_a_real_protocol_model_keeps_its_key_in_the_gateway(
    runtimes: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model reached over HTTP in its own protocol (Anthropic Messages, while mini-swe-agent speaks
    OpenAI chat to the gateway), with a sentinel key: resolved on both runtimes, cost and params in the
    rows, and the key in no file of the run directory and no process's command line meanwhile."""
    import asyncio
    import subprocess
    import threading
    import uuid

    from anyswe.datasets import load_dataset
    from anyswe.gateway import Gateway, ScriptedModel

    key = f"sk-anyswe-sentinel-{uuid.uuid4().hex}"
    instance = load_dataset("demo").instances[0]
    ready, done = threading.Event(), threading.Event()
    url: list[str] = []

    def provider() -> None:  # the "model provider": checks the key, answers as the oracle
        async def serve() -> None:
            async with Gateway() as gw:
                await gw.start()
                oracle = ScriptedModel.oracle(
                    instance.patch, "/testbed", submit="echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
                )
                gw.grant("provider", "m", oracle, token=key)
                url.append(gw.url())
                ready.set()
                while not done.is_set():
                    await asyncio.sleep(0.05)

        asyncio.run(serve())

    seen: list[str] = []

    def watch() -> None:
        while not done.is_set():
            seen.append(subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout)
            done.wait(0.3)

    threads = [threading.Thread(target=provider, daemon=True), threading.Thread(target=watch, daemon=True)]
    for t in threads:
        t.start()
    assert ready.wait(30)
    monkeypatch.setenv("ANYSWE_TEST_SENTINEL_KEY", key)
    model = (
        f"{{api: anthropic-messages, model: m, base_url: '{url[0]}', api_key_env: ANYSWE_TEST_SENTINEL_KEY, "
        "params: {temperature: 1.0}, prices: {input: 3.0, output: 15.0}}"
    )
    exp = Experiment.load(
        REPO / "specs" / "agents_demo.yaml",
        overrides=[f"dataset.instance_ids=[{instance.instance_id}]", f"models.real={model}", "matrix.models=[real]"],
        run_dir=tmp_path / "run",
    )
    try:
        exp.run(progress=False)
    finally:
        done.set()
        for t in threads:
            t.join(30)
    df = exp.results()
    assert df.height == 2 and df["resolved"].all() and set(df["exit_reason"]) == {"submitted"}
    assert set(df["model_params"]) == {'{"temperature": 1.0}'} and (df["cost_usd"] > 0).all()
    leaks = [p for p in (tmp_path / "run").rglob("*") if p.is_file() and key.encode() in p.read_bytes()]
    assert leaks == [] and len(seen) > 3 and not any(key in snapshot for snapshot in seen)


def test_per_task_scripts_resolve_every_demo_task(runtimes: None, tmp_path: Path) -> None:
    from anyswe.datasets import demo

    committed = {p.stem: json.loads(p.read_text())["steps"] for p in (REPO / "specs" / "demo-scripts").glob("*.json")}
    assert committed == demo.scripts()  # the files are what the demo's fix/ directories say
    exp = Experiment.load(
        REPO / "specs" / "agents_demo.yaml",
        overrides=["matrix.models=[scripted-script]", "matrix.providers=[docker]"],
        run_dir=tmp_path / "run",
    )
    exp.run(progress=False)
    df = exp.results()
    assert df.height == 8 and df["resolved"].all() and set(df["exit_reason"]) == {"submitted"}
