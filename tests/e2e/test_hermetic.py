"""What an agent can reach: no gold patch, no test patch, no future history, no host secrets."""

from __future__ import annotations

import dataclasses
import json
import os
import pwd
from pathlib import Path
from typing import ClassVar, Literal

import polars as pl
import pytest

from anyswe._files import read_task_file
from anyswe.agents import Agent, AgentConfig, AgentContext, AgentOutcome, register_agent
from anyswe.agents.bundles import STATE_DIR
from anyswe.datasets import load_dataset
from anyswe.experiment import Experiment
from anyswe.sandbox import Mount, SandboxRequest

pytestmark = pytest.mark.containers

ROOTS = "/testbed /tmp /root /home /opt /srv /var /etc /usr/lib/python3"


class ProbeConfig(AgentConfig):
    type: Literal["probe"] = "probe"


class ProbeAgent(Agent):
    """Looks everywhere it can for the answers, and logs what it found."""

    name: ClassVar[str] = "probe"
    config_class = ProbeConfig
    needs_model = False

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        sb = ctx.sandbox
        commits = (await sb.exec(["git", "log", "--all", "--format=%H"], workdir=ctx.workdir)).stdout.split()
        # The first needle is in the base repo: it proves the search can find things.
        needles = [
            "class Inventory",
            "test_remove_too_many_raises",
            "test_stock_never_negative",
            "in stock",
            "FAIL_TO_PASS",
        ]
        found = {}
        for needle in needles:
            r = await sb.exec(f"grep -rIl --exclude-dir=proc --exclude-dir=sys -e {needle!r} {ROOTS} 2>/dev/null")
            found[needle] = r.stdout.split()
        env = (await sb.exec("env")).stdout
        # Objects the base commit does not reach (a fixed file, a test file stored while deriving patches).
        fsck = await sb.exec(["git", "fsck", "--unreachable", "--lost-found", "--no-reflogs"], workdir=ctx.workdir)
        objects = await sb.exec(["git", "cat-file", "--batch-all-objects", "--batch-check"], workdir=ctx.workdir)
        reachable = await sb.exec(["git", "rev-list", "--objects", "--all"], workdir=ctx.workdir)
        ctx.log(
            json.dumps(
                {
                    "commits": commits,
                    "found": found,
                    "env": env,
                    "fsck": fsck.stdout + fsck.stderr,
                    "objects": len(objects.stdout.splitlines()),
                    "reachable": len(reachable.stdout.splitlines()),
                }
            )
        )
        return AgentOutcome()


register_agent("probe", f"{__name__}:ProbeAgent")


def test_agent_cannot_reach_answers_or_secrets(runtimes: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-host-secret-never-inside")
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "name: hermetic\ndataset: {name: demo, instance_ids: [demo__inventory-4]}\n"
        "agents:\n  p: {type: probe}\n"
        "providers:\n  docker: {type: docker}\n  apptainer: {type: apptainer, overlay_size_mb: 256}\n"
    )
    exp = Experiment.load(spec, run_dir=tmp_path / "run")
    exp.run(progress=False)
    rows = exp.results()
    assert rows.height == 2 and rows["error_kind"].is_null().all()
    base = load_dataset("demo").by_id()["demo__inventory-4"].base_commit
    for key in rows.filter(pl.col("agent") == "p")["key"]:
        probe = json.loads((exp.run_dir / "tasks" / key / "agent.log").read_text().strip().splitlines()[-1])
        assert probe["commits"] == [base]  # no future history
        found = probe["found"]
        assert found.pop("class Inventory") == ["/testbed/inventory.py"]
        assert found == {n: [] for n in found}, found
        assert "sk-host-secret" not in probe["env"]
        assert "unreachable" not in probe["fsck"] and "dangling" not in probe["fsck"], probe["fsck"]
        assert probe["objects"] == probe["reachable"] > 0  # every stored object belongs to the base commit


def test_an_image_with_the_repositorys_future_is_sealed_before_the_agent(runtimes: None, tmp_path: Path) -> None:
    """An image made otherwise than swebench 4.x makes them (a later commit on a branch, a tag, a
    reflog, an unreachable blob with the fix): the agent's sandbox holds none of it, the grade holds."""
    import asyncio
    import uuid

    from python_on_whales import docker

    from anyswe.config import base_image
    from anyswe.datasets import demo
    from anyswe.sandbox.store import build_image

    dockerfile, tag = demo.build_context("demo__inventory-4", base_image())
    asyncio.run(build_image(dockerfile, tag))
    leaky = f"anyswe-test/future:{uuid.uuid4().hex[:8]}"
    (tmp_path / "ctx").mkdir()
    (tmp_path / "ctx" / "Dockerfile").write_text(
        f"FROM {tag}\n"
        "RUN cd /testbed && git -c user.name=f -c user.email=f@f checkout -q -b future"
        " && echo 'class Inventory: in stock' > leak.py && git add leak.py"
        " && git -c user.name=f -c user.email=f@f commit -q -m future && git tag v9 && git checkout -q main"
        " && echo 'test_stock_never_negative' | git hash-object -w --stdin\n"
    )
    # anyswe's own build (--force-rm): a failed step leaves no container behind.
    asyncio.run(build_image(tmp_path / "ctx" / "Dockerfile", leaky))
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "name: sealed\ndataset: {name: demo, instance_ids: [demo__inventory-4]}\n"
        # Two samples: the clean-up is in each sandbox's own overlay, so every sandbox of a leaky image
        # is cleaned (none relies on an earlier one's finding, as sandboxes of a sealed image do).
        "samples: 2\nagents:\n  p: {type: probe}\n  g: {type: gold}\n"
        f"providers:\n  docker: {{type: docker, image: '{leaky}'}}\n"
    )
    try:
        exp = Experiment.load(spec, run_dir=tmp_path / "run")
        exp.run(progress=False)
        rows = {(r["agent"], r["sample"]): r for r in exp.results().iter_rows(named=True)}
        assert len(rows) == 4 and all(rows["g", s]["resolved"] for s in (0, 1)), rows
        base = load_dataset("demo").by_id()["demo__inventory-4"].base_commit
        for sample in (0, 1):
            row = rows["p", sample]
            assert row["error_kind"] is None, row
            log = (exp.run_dir / "tasks" / row["key"] / "agent.log").read_text().strip().splitlines()
            assert "repository before the agent: cleaned" in log
            probe = json.loads(log[-1])
            assert probe["commits"] == [base]
            assert "unreachable" not in probe["fsck"] and probe["objects"] == probe["reachable"]
            assert probe["found"]["test_stock_never_negative"] == []
    finally:
        docker.image.remove(leaky, force=True)


def test_an_image_that_is_not_the_instances_never_runs_the_agent_and_is_not_retried(
    runtimes: None, tmp_path: Path
) -> None:
    """A repository whose commits after the base edit the file the fix goes in, one whose HEAD does not
    descend from the base, none holding the base, no image at all: the sandbox is not the task's, so
    the task is a permanent infra error naming what was found, no agent ran, and with three attempts
    allowed it is tried once (no attempt can change it)."""
    import asyncio
    import uuid

    from python_on_whales import docker

    from anyswe.config import base_image
    from anyswe.datasets import demo
    from anyswe.sandbox.store import build_image

    dockerfile, tag = demo.build_context("demo__inventory-4", base_image())
    asyncio.run(build_image(dockerfile, tag))
    suffix = uuid.uuid4().hex[:8]
    git = "git -c user.name=f -c user.email=f@f"
    images = {
        # A setup commit that puts the fix in: inventory.py is the file the reference patch touches.
        "ahead": (
            f"anyswe-test/ahead:{suffix}",
            f"RUN cd /testbed && echo '# fixed' >> inventory.py && {git} commit -q -am setup",
        ),
        "elsewhere": (
            f"anyswe-test/elsewhere:{suffix}",
            f"RUN cd /testbed && git checkout -q --orphan other && {git} commit -q -m unrelated",
        ),
        "nogit": (f"anyswe-test/nogit:{suffix}", "RUN rm -rf /testbed/.git"),
    }
    for name, (image, step) in images.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "Dockerfile").write_text(f"FROM {tag}\n{step}\n")
        asyncio.run(build_image(tmp_path / name / "Dockerfile", image))
    spec = tmp_path / "spec.yaml"
    providers = "".join(f"  {n}: {{type: docker, image: '{image}'}}\n" for n, (image, _) in images.items())
    providers += f"  missing: {{type: docker, image: 'anyswe-test/never-built:{suffix}'}}\n"
    spec.write_text(
        "name: unsealable\ndataset: {name: demo, instance_ids: [demo__inventory-4]}\n"
        "retries: {max_attempts: 3, backoff: 0}\nagents:\n  p: {type: probe}\n" + f"providers:\n{providers}"
    )
    try:
        exp = Experiment.load(spec, run_dir=tmp_path / "run")
        summary = exp.run(progress=False)
        from anyswe.results.store import read_results

        attempts = read_results(exp.run_dir / "results.jsonl")  # every attempt's row, not just the latest
        assert len(attempts) == 4 and summary.ran == 4, attempts  # one attempt each: none was retried
        assert "4 infra (4 infra permanent" in str(summary), str(summary)
        rows = {r["provider"]: r for r in exp.results().iter_rows(named=True)}
        base = load_dataset("demo").by_id()["demo__inventory-4"].base_commit
        assert "change files the reference or test patch touches (inventory.py)" in rows["ahead"]["error"]
        assert f"commit(s) after the task's base commit {base}" in rows["ahead"]["error"]
        assert f"does not descend from the task's base commit {base}" in rows["elsewhere"]["error"]
        assert f"no repository at /testbed holds the task's base commit {base}" in rows["nogit"]["error"]
        assert "is not available locally" in rows["missing"]["error"]
        for row in rows.values():
            assert row["error_kind"] == "infra" and row["error_permanent"] and row["attempt"] == 1, row
            assert not row["resolved"] and row["mask_sample"] and not row["time_agent"], row
            log = exp.run_dir / "tasks" / row["key"] / "agent.log"
            assert not log.exists() or '"commits"' not in log.read_text(), "the probe agent ran"
    finally:
        for image, _ in images.values():
            docker.image.remove(image, force=True)


class MeddlerConfig(AgentConfig):
    type: Literal["meddler"] = "meddler"


class MeddlerAgent(Agent):
    """Writes the fix, commits part of it, and sets every git option that changes how a diff looks."""

    name: ClassVar[str] = "meddler"
    config_class = MeddlerConfig
    needs_model = False
    needs_reference = True

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        assert ctx.reference_patch is not None
        await ctx.sandbox.write_file("/tmp/fix.diff", ctx.reference_patch.encode())
        steps = [
            "git apply /tmp/fix.diff && rm /tmp/fix.diff",
            # Its own work committed: the capture is against the starting point, not HEAD.
            "git -c user.name=a -c user.email=a@a commit -q -am 'my fix'",
            "git config --global color.ui always && git config --global diff.noprefix true",
            "git config diff.context 0 && git config diff.mnemonicPrefix true && git config diff.external /bin/false",
            "echo '*.py diff=shout' >> .git/info/attributes && git config diff.shout.textconv 'tr a-z A-Z <'",
        ]
        for step in steps:
            r = await ctx.sandbox.exec(["bash", "-c", step], workdir=ctx.workdir)
            ctx.log(f"$ {step}\n(exit {r.exit_code}) {r.stderr}")
        return AgentOutcome()


register_agent("meddler", f"{__name__}:MeddlerAgent")


def test_the_agents_git_config_cannot_change_the_captured_patch(runtimes: None, tmp_path: Path) -> None:
    """Colour, no prefixes, no context, an external diff and a textconv, and a commit of its own: the
    captured patch is still the plain diff from the starting point, and it resolves."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "name: meddle\ndataset: {name: demo-swebench, instance_ids: [demo__inventory-4]}\n"
        "agents:\n  m: {type: meddler}\n"
        "providers:\n  docker: {type: docker}\n  apptainer: {type: apptainer, overlay_size_mb: 256}\n"
    )
    exp = Experiment.load(spec, run_dir=tmp_path / "run")
    exp.run(progress=False)
    rows = exp.results()
    assert rows.height == 2 and rows["error_kind"].is_null().all(), rows
    for row in rows.iter_rows(named=True):
        assert row["resolved"] and row["applied_by"] == "git apply --verbose", row
        patch = row["model_patch"]
        assert "\x1b[" not in patch and "diff --git a/inventory.py b/inventory.py" in patch, patch
        # The image's setup commit (its pre_install edit of setup.cfg) is the starting point, not the base.
        log = (exp.run_dir / "tasks" / row["key"] / "agent.log").read_text()
        assert "1 commit(s) after the base" in log and "setup.cfg" not in patch, log


class PlanterConfig(AgentConfig):
    type: Literal["planter"] = "planter"
    secret: str = ""


class PlanterAgent(Agent):
    """Plants links to the host's secrets in its state dir (as the image's non-root user), and the
    host copies what it left there the way the CLI agents do."""

    name: ClassVar[str] = "planter"
    config_class = PlanterConfig
    config: PlanterConfig
    needs_model = False

    def sandbox_request(self, request: SandboxRequest, *, model: object, state_dir: Path) -> SandboxRequest:
        mount = Mount(str(state_dir), STATE_DIR, read_only=False)
        return dataclasses.replace(request, mounts=(*request.mounts, mount))

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        assert ctx.state_dir is not None
        user = None if type(ctx.sandbox).__module__.endswith("apptainer") else "nobody"  # apptainer: the host's user
        plant = (
            f"mkdir -p {STATE_DIR}/logs && ln -s /proc/self/environ {STATE_DIR}/logs/errors.log && "
            f"ln -s {self.config.secret} {STATE_DIR}/secret.log && mkfifo {STATE_DIR}/pipe.log && "
            f"ln -s / {STATE_DIR}/root && id -un > {STATE_DIR}/plain.log"
        )
        r = await ctx.sandbox.exec(plant, user=user)
        ctx.log(f"planted (exit {r.exit_code}) {r.stderr}")
        names = ("logs/errors.log", "secret.log", "pipe.log", "root/etc/passwd", "plain.log")
        return AgentOutcome(artifacts={n.replace("/", "-"): str(read_task_file(ctx.state_dir, n)) for n in names})


register_agent("planter", f"{__name__}:PlanterAgent")


def test_links_planted_in_the_state_dir_are_not_followed_by_the_host(runtimes: None, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("anyswe-sentinel-host-secret-5f1c\n")
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "name: planted\ndataset: {name: demo, instance_ids: [demo__inventory-4]}\n"
        f"agents:\n  p: {{type: planter, secret: {secret}}}\n"
        "providers:\n  docker: {type: docker}\n  apptainer: {type: apptainer, overlay_size_mb: 256}\n"
    )
    exp = Experiment.load(spec, run_dir=tmp_path / "run")
    exp.run(progress=False)
    rows = exp.results()
    assert rows.height == 2 and rows["error_kind"].is_null().all(), rows
    for row in rows.iter_rows(named=True):
        task = exp.run_dir / "tasks" / row["key"]
        log = (task / "agent.log").read_text()
        assert "planted (exit 0)" in log, log
        copied = {p.name: p.read_text() for p in task.glob("agent-*")}
        assert "sentinel" not in "".join(copied.values()) and "PATH=" not in "".join(copied.values())
        assert copied["agent-logs-errors.log"] == "[anyswe: logs/errors.log not copied: it is a symbolic link]\n"
        assert copied["agent-secret.log"] == "[anyswe: secret.log not copied: it is a symbolic link]\n"
        assert "it is not a regular file (mode prw" in copied["agent-pipe.log"]
        assert "root is not a directory (a link or a file)" in copied["agent-root-etc-passwd"]
        # The image's (non-root, on docker) user could write the state dir.
        writer = "nobody" if row["provider"] == "docker" else pwd.getpwuid(os.getuid()).pw_name
        assert copied["agent-plain.log"].strip() == writer, copied
