"""`anyswe triage` (issue 22, item 2) tells the three kinds of docker-vs-apptainer flip apart, on the
demo benchmark on both runtimes, with a planted case of each:

- flaky: the fix, plus an ``add`` that is wrong in one test process in two (drawn at import);
- backend-systematic: the fix, plus an ``is_leap`` that raises where there is no ``/.dockerenv``
  (docker makes that file in every container; a SIF built from the image has none);
- agent variance: the fix on docker, a comment instead of the fix on apptainer.

The flaky flip is random by nature: the run gets samples until one of them flips (one sample in
two does), as a real run would show it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, ClassVar, Literal

import pytest
from typer.testing import CliRunner

from anyswe.agents import Agent, AgentConfig, AgentContext, AgentOutcome, register_agent
from anyswe.cli import app
from anyswe.execute.triage import GRADES, KINDS, TRIAGE_DIR, triage
from anyswe.experiment import Experiment

pytestmark = pytest.mark.containers

FLAKY = """

import random as _random

_add = add
_WRONG = _random.random() < 0.5  # one test process in two


def add(a, b):  # planted: flaky
    return _add(a, b) + (1 if _WRONG else 0)
"""

BACKEND = """

import os as _os

_is_leap = is_leap


def is_leap(year):  # planted: differs by runtime
    if not _os.path.exists("/.dockerenv"):
        raise RuntimeError("planted: no /.dockerenv on this runtime")
    return _is_leap(year)
"""

FILES = {"demo__calc-1": ("calc.py", FLAKY), "demo__leap-5": ("leap.py", BACKEND)}


class PlantedConfig(AgentConfig):
    type: Literal["planted"] = "planted"


class PlantedAgent(Agent):
    """The reference fix with a planted flip (see the module's docstring)."""

    name: ClassVar[str] = "planted"
    config_class = PlantedConfig
    needs_model = False
    needs_reference = True

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        assert ctx.reference_patch is not None
        iid = ctx.task.instance_id
        if iid == "demo__inventory-4" and ctx.sandbox.provider.config.type == "apptainer":
            step = "echo '# planted: no fix' >> inventory.py"
        else:
            await ctx.sandbox.write_file("/tmp/fix.diff", ctx.reference_patch.encode())
            step = "git apply /tmp/fix.diff && rm /tmp/fix.diff"
            if iid in FILES:
                path, code = FILES[iid]
                await ctx.sandbox.write_file("/tmp/planted.py", code.encode())
                step += f" && cat /tmp/planted.py >> {path} && rm /tmp/planted.py"
        r = await ctx.sandbox.exec(["bash", "-c", step], workdir=ctx.workdir, timeout=60)
        assert r.ok, r
        return AgentOutcome()


register_agent("planted", f"{__name__}:PlantedAgent")

IDS = ["demo__calc-1", "demo__leap-5", "demo__inventory-4"]
K = 6  # a flaky patch looks stable on both backends over K regrades once in 2**(2K) triages


def _flipped(exp: Experiment, iid: str) -> bool:
    rows = exp.results().filter(exp.results()["instance_id"] == iid).iter_rows(named=True)
    by_sample: dict[int, set[bool]] = {}
    for r in rows:
        by_sample.setdefault(r["sample"], set()).add(bool(r["resolved"]))
    return any(len(v) == 2 for v in by_sample.values())


def test_triage_tells_flaky_backend_and_agent_flips_apart(runtimes: None, tmp_path: Path, browse: Any) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        f"name: triage\ndataset: {{name: demo-swebench, instance_ids: {IDS}}}\n"
        "agents: {planted: {type: planted}}\n"
        "providers:\n  docker: {type: docker}\n  apptainer: {type: apptainer, overlay_size_mb: 256}\n"
        "retries: {max_attempts: 1}\n"
    )
    run = tmp_path / "run"
    for samples in range(1, 13):  # P(no flaky flip in 12 samples) = 2**-12
        exp = Experiment.load(spec, overrides=[f"samples={samples}"], run_dir=run)
        exp.run(progress=False)
        if _flipped(exp, "demo__calc-1"):
            break
    assert _flipped(exp, "demo__calc-1") and _flipped(exp, "demo__leap-5") and _flipped(exp, "demo__inventory-4")

    found = exp.triage(k=K)
    kinds: dict[str, set[str]] = {}
    for f in found.findings:
        kinds.setdefault(f.instance_id, set()).add(f.kind)
    assert kinds == {
        "demo__calc-1": {"flaky"},
        "demo__leap-5": {"backend-systematic"},
        "demo__inventory-4": {"agent-variance"},
    }, [(f.instance_id, f.kind, f.verdicts) for f in found.findings]
    by_id = {f.instance_id: f for f in found.findings}
    # The flaky one names the tests whose status varied: every test of add.
    assert {t for t in by_id["demo__calc-1"].tests if "test_add" in t} == {
        "tests/test_calc.py::test_add[1-2-3]",
        "tests/test_calc.py::test_add[-1-1-0]",
        "tests/test_calc.py::test_add[0-0-0]",
    }
    # The backend one names the tests that differ and the first line of their failure, on apptainer.
    leap = by_id["demo__leap-5"]
    assert "tests/test_leap.py::test_century_is_not_leap" in leap.tests
    line = leap.detail["tests/test_leap.py::test_century_is_not_leap"]
    assert line == "apptainer: RuntimeError: planted: no /.dockerenv on this runtime", line
    # Each patch was graded K times on each backend (the agent-variance flip has two patches).
    grades = [json.loads(x) for x in (run / TRIAGE_DIR / GRADES).read_text().splitlines()]
    assert len(grades) == K * 2 * 4 and all(g["error"] is None for g in grades)

    # Resumable: a second triage grades nothing again and says the same.
    again = triage(run, k=K)
    assert (run / TRIAGE_DIR / GRADES).read_text().count("\n") == len(grades)
    assert [(f.instance_id, f.kind) for f in again.findings] == [(f.instance_id, f.kind) for f in found.findings]

    # The CLI (in this process, where the planted agent is registered): the table, and a diff that
    # leaves the flaky instance out.
    table = CliRunner().invoke(app, ["triage", str(run), "-k", str(K), "--json"])
    assert table.exit_code == 0, table.output
    assert {json.loads(x)["kind"] for x in table.output.splitlines()} == set(KINDS) - {"undetermined"}
    diff = CliRunner().invoke(app, ["diff", str(run), "--exclude-flaky", str(run), "--json"])
    assert diff.exit_code == 0, diff.output
    (comparison,) = [json.loads(x) for x in diff.output.splitlines()]
    flipped = {i.split("#")[0] for side in comparison["flips"].values() for i in side["instance_ids"]}  # id#sN
    assert "demo__calc-1" not in flipped and {"demo__leap-5", "demo__inventory-4"} <= flipped
    _report_flips(run, browse)


def _report_flips(run: Path, browse: Any) -> None:
    from anyswe.results.report import write_report

    out = write_report(run, run / "report.html")
    page = out.read_text()
    for kind in ("flaky", "backend-systematic", "agent-variance"):
        assert f"<td class=kind>{kind}</td>" in page
    # A flip's two tasks, each a link that opens it, and both side by side.
    link = re.search(r'<tr class="flip-row"><td>demo__leap-5 #\d+</td><td><a href="#task=([^"]+)">', page)
    assert link is not None
    dom = browse(f"{out.as_uri()}#task={link[1]}", screenshot="report-flip-task")
    assert f'data-key="{link[1]}"' in dom and dom.count('data-drawn="1"') == 1
    pair = re.search(r'<a class=compare href="#pair=([^"]+)">', page[page.index("demo__leap-5 #") :])
    assert pair is not None
    dom = browse(f"{out.as_uri()}#pair={pair[1]}", screenshot="report-flip-pair")
    panel = dom[dom.index('id="pair"') : dom.index("<th>A</th>", dom.index('id="pair"'))]
    assert panel.count('class="side"') == 2 and panel.count('data-drawn="1"') == 2
    assert "planted.none.docker" in panel and "planted.none.apptainer" in panel and "no /.dockerenv" in panel


def test_grade_gives_a_runs_patches_again_and_names_what_changed(runtimes: None, tmp_path: Path) -> None:
    """``anyswe grade RUN``: the recorded patches graded live again (anyswe.grade, a fresh sandbox each):
    on their own backends nothing changes; the docker cell's planted leap patch graded on apptainer
    changes verdict (it needs /.dockerenv); a second run resumes (grades nothing again)."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "name: grade\ndataset: {name: demo-swebench, instance_ids: [demo__leap-5]}\n"
        "agents: {planted: {type: planted}}\n"
        "providers:\n  docker: {type: docker}\n  apptainer: {type: apptainer, overlay_size_mb: 256}\n"
    )
    run = tmp_path / "run"
    Experiment.load(spec, run_dir=run).run(progress=False)
    own = CliRunner().invoke(app, ["grade", str(run), "--json"])
    assert own.exit_code == 0, own.output
    rows = [json.loads(x) for x in own.output.splitlines()]
    assert sorted((r["graded_on"], r["recorded"], r["resolved"]) for r in rows) == [
        ("apptainer", False, False),
        ("docker", True, True),
    ]
    moved = CliRunner().invoke(app, ["grade", str(run), "--provider", "apptainer"])
    assert moved.exit_code == 0, moved.output
    assert "2 patches graded again: 1 changed verdict" in moved.output and "planted.none.docker" in moved.output
    graded = (run / "regrade" / "apptainer.jsonl").read_text()
    again = CliRunner().invoke(app, ["grade", str(run), "--provider", "apptainer"])
    assert again.exit_code == 0 and (run / "regrade" / "apptainer.jsonl").read_text() == graded
    unknown = CliRunner().invoke(app, ["grade", str(run), "--provider", "podman"])
    assert unknown.exit_code != 0 and "has no provider 'podman'" in unknown.output
