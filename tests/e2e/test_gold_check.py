"""`anyswe gold-check` (the gold census) on both backends: the demo benchmark (nothing to exclude), and
SWE-bench-shaped demo rows with three broken on purpose (a gold patch that applies but fixes nothing,
one that does not apply, a FAIL_TO_PASS test that passes without the fix): each is excluded with
its bucket and failing tests per provider, and a spec naming the list leaves them out of the plan,
the tables and the report. Flaky buckets (a pass that disagrees) are in tests/unit/test_gold_census.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from anyswe.datasets.exclusions import read_exclusions

pytestmark = [pytest.mark.containers, pytest.mark.usefixtures("runtimes")]

ANYSWE = [sys.executable, "-m", "anyswe"]
NOT_A_FIX = """\
diff --git a/NOT_A_FIX.txt b/NOT_A_FIX.txt
new file mode 100644
--- /dev/null
+++ b/NOT_A_FIX.txt
@@ -0,0 +1 @@
+this changes nothing the tests look at
"""


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ANYSWE, *args], capture_output=True, text=True, timeout=1200)


def _spec(tmp_path: Path, dataset: dict[str, object], name: str = "g") -> Path:
    spec = {
        "name": name,
        "dataset": dataset,
        "agents": {"gold": {"type": "gold"}},
        "providers": {"docker": {"type": "docker"}, "apptainer": {"type": "apptainer"}},
        "output_dir": str(tmp_path / f"runs-{name}"),
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(json.dumps(spec))
    return path


def test_demo_gold_patches_resolve_everywhere(tmp_path: Path) -> None:
    spec = _spec(tmp_path, {"name": "demo", "instance_ids": ["demo__calc-1", "demo__stack-8"]})
    out = tmp_path / "exclusions.yaml"
    r = _cli("gold-check", str(spec), "-o", str(out), "--run-dir", str(tmp_path / "gold"))
    assert r.returncode == 0, r.stdout + r.stderr
    found = read_exclusions(out)
    assert found.exclude == [] and found.checked_on == ["docker", "apptainer"] and found.dataset == "demo"
    rows = [json.loads(line) for line in (tmp_path / "gold" / "results.jsonl").read_text().splitlines()]
    assert sorted((r["provider"], r["instance_id"], r["resolved"]) for r in rows) == [
        (p, i, True) for p in ("apptainer", "docker") for i in ("demo__calc-1", "demo__stack-8")
    ]


def test_broken_gold_patches_are_excluded_on_every_backend(tmp_path: Path) -> None:
    rows_file = tmp_path / "rows.jsonl"
    r = _cli("prepare", "dataset", "demo-swebench", "-o", str(rows_file))
    assert r.returncode == 0, r.stderr
    rows = {json.loads(line)["instance_id"]: json.loads(line) for line in rows_file.read_text().splitlines()}
    rows["demo__slug-2"]["patch"] = NOT_A_FIX
    rows["demo__leap-5"]["patch"] = "this is not a diff\n"
    # A "FAIL_TO_PASS" test that passes at the base commit: the tests cannot tell the fix apart.
    rows["demo__stack-8"]["FAIL_TO_PASS"] = ["tests/test_stack.py::test_len"]
    rows_file.write_text("".join(json.dumps(r) + "\n" for r in rows.values()))
    ids = ["demo__calc-1", "demo__slug-2", "demo__leap-5", "demo__wrap-6", "demo__stack-8"]
    dataset = {"name": "demo-swebench", "path": rows_file.name, "instance_ids": ids}

    out = tmp_path / "exclusions.yaml"
    census = tmp_path / "census"
    r = _cli("gold-check", str(_spec(tmp_path, dataset)), "-o", str(out), "--passes", "2", "--run-dir", str(census))
    assert r.returncode == 0, r.stdout + r.stderr
    found = read_exclusions(out)
    assert found.passes == 2
    assert [e.instance_id for e in found.exclude] == ["demo__leap-5", "demo__slug-2", "demo__stack-8"]
    slug, stack = found.exclude[1], found.exclude[2]
    assert slug.reason == "gold patch does not resolve on apptainer, docker"
    assert stack.reason == "tests pass without the fix on apptainer, docker"
    assert slug.census == stack.census == {"docker": "broken", "apptainer": "broken"}
    # The evidence: two gold rows and two empty passes per instance and provider.
    gold_rows = [json.loads(x) for x in (census / "results.jsonl").read_text().splitlines()]
    empty = [json.loads(x) for x in (census / "empty.jsonl").read_text().splitlines()]
    assert len(gold_rows) == len(empty) == 2 * 2 * len(ids)
    without_fix = {(e["instance_id"], e["verdict"]) for e in empty}
    assert without_fix == {(i, "resolved" if i == "demo__stack-8" else "unresolved") for i in ids}
    assert "broken" in r.stdout and "supported" in r.stdout  # the census table
    # The buckets with their evidence, one line per instance and provider.
    evidence = {(e["instance_id"], e["provider"]): e for e in map(json.loads, (census / "census.jsonl").open())}
    assert len(evidence) == 2 * len(ids)
    for provider in ("docker", "apptainer"):
        assert evidence["demo__calc-1", provider] == {
            "instance_id": "demo__calc-1", "provider": provider, "bucket": "supported", "why": None,
            "gold": ["resolved"] * 2, "empty": ["unresolved"] * 2, "failing": [],
        }  # fmt: skip
        stacked = evidence["demo__stack-8", provider]
        assert (stacked["bucket"], stacked["why"], stacked["empty"]) == (
            "broken",
            "tests pass without the fix",
            ["resolved"] * 2,
        )
    # The census's own gold run, over its supported set: every gold pass there resolves.
    over = _cli("results", str(census), "--over", str(out), "--json")
    assert over.returncode == 0, over.stderr
    cells = {c["cell"]: c for c in map(json.loads, over.stdout.splitlines())}
    assert {n: (c["tasks"], c["resolved"]) for n, c in cells.items()} == {
        f"gold.none.{p}": (2 * 2, 2 * 2) for p in ("docker", "apptainer")
    }
    f2p = rows["demo__slug-2"]["FAIL_TO_PASS"]
    for provider in ("docker", "apptainer"):
        # The tests that still fail with that "gold" patch: FAIL_TO_PASS, on each backend alike.
        assert set(slug.failing[provider]) == set(json.loads(f2p) if isinstance(f2p, str) else f2p)
        assert found.exclude[0].failing[provider] == ["(the gold patch did not apply)"]
    assert "exclude demo__slug-2: gold patch does not resolve on apptainer, docker" in r.stdout

    # A spec naming the list runs neither, on any provider, and says so in its tables and report.
    dataset["exclude_file"] = out.name
    spec = _spec(tmp_path, dataset, name="run")
    run = _cli("apply", str(spec))
    assert run.returncode == 0, run.stdout + run.stderr
    done = [json.loads(line) for line in (tmp_path / "runs-run" / "results.jsonl").read_text().splitlines()]
    assert sorted({r["instance_id"] for r in done}) == ["demo__calc-1", "demo__wrap-6"]
    assert len(done) == 4 and all(r["resolved"] for r in done)
    note = "excluded on every provider: 3 instance(s): demo__leap-5, demo__slug-2, demo__stack-8"
    assert note in run.stdout
    assert note in _cli("results", str(tmp_path / "runs-run")).stdout
    report = tmp_path / "report.html"
    assert _cli("report", str(tmp_path / "runs-run"), "-o", str(report)).returncode == 0
    html = report.read_text()
    assert "3 instance(s) excluded on every provider" in html and "gold patch does not resolve on" in html
