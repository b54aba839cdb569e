"""What the real-image tiers share: an instance's eval run by hand with plain docker (swebench's
procedure, or a benchmark's own), and ``anyswe apply`` run as a user runs it.

A by-hand run is the reference anyswe's verdicts are held to, and a function of the image, the patch
and the eval script alone: it is kept on this machine (``<cache>/test-references/``) under the
hash of the image's ID and those two, as the images and SIFs it is made from are, and a later run
on the very same image reads it instead of running it again. A rebuilt image (a cold run, a changed
build) has another ID and is run by hand again. anyswe's own gradings, which the tiers test, always
run. (The C instances' evals rebuild their projects: redis's takes 94 s of one core each time.)"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from anyswe.datasets.instance import Instance
from anyswe.grading import swebench as sb
from anyswe.results.schema import TaskResult
from anyswe.results.store import read_results

EVAL_TIMEOUT = 1800
ANYSWE = [sys.executable, "-m", "anyswe"]


@dataclass
class ByHandRun:
    """One eval run by hand: what was applied, the eval script's whole output, how long it took."""

    patch: str
    applied: bool
    apply_output: str
    output: str
    seconds: float


def docker(*argv: str, stdin: str | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *argv], input=stdin, capture_output=True, text=True, timeout=timeout, check=False)


def kept_reference(
    image: str, inputs: tuple[str, ...], make: Callable[[], tuple[dict[str, Any], bool]]
) -> dict[str, Any]:
    """A by-hand run's result on ``image`` from ``inputs`` (the patch, the scripts: everything it is a
    function of besides the image): kept from an earlier run on the very same image (by its ID), or
    ``make()``'s (the result, and whether it may be kept), kept when it may (the module's docstring)."""
    from anyswe.config import cache_dir

    image_id = docker("image", "inspect", "--format", "{{.Id}}", image).stdout.strip()
    assert image_id.startswith("sha256:"), f"{image}: no such image"
    key = hashlib.sha256("\0".join((image_id, *inputs)).encode()).hexdigest()
    kept = cache_dir() / "test-references" / f"{key}.json"
    kept.parent.mkdir(parents=True, exist_ok=True)
    # One maker per reference across pytest-xdist's workers: two files on one image (the Multilingual
    # tier's images and verdicts) would otherwise both run the same eval by hand at once.
    with kept.with_suffix(".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if kept.is_file():
            return dict(json.loads(kept.read_text()))
        result, keep = make()
        if keep:
            partial = kept.with_suffix(f".{os.getpid()}.tmp")
            partial.write_text(json.dumps(result))
            partial.replace(kept)  # whole or absent: a killed run leaves no half a reference
        return result


def run_by_hand(
    image: str, instance: Instance, patch: str, script: Callable[[Instance], str] = sb.eval_script
) -> ByHandRun:
    """swebench's procedure with plain docker: a fresh container, the patch by `git apply -v` (none if
    empty), swebench's eval script by `/bin/bash /eval.sh` with stdout and stderr together; or its
    reference from an earlier run of the same image, patch and script (the module's docstring)."""
    text = script(instance)

    def make() -> tuple[dict[str, Any], bool]:
        run = _run_by_hand(image, patch, text)
        if script is sb.eval_script and not _whole(instance, run):
            # Seen once here: fmt-3248's empty run ended mid-binary (after format_test.prettify_float)
            # while every anyswe grading of it ran all 115 tests; the cause was not found. A reference
            # cut off so would fail every later run on the image if kept, so it is run once more, and
            # kept only when whole. (The reference side only: anyswe's gradings are never re-run.)
            run = _run_by_hand(image, patch, text)
            return run.__dict__, _whole(instance, run)  # compared as it is, and kept only when whole
        return run.__dict__, True

    data = kept_reference(image, (patch, text), make)
    return ByHandRun(**{f.name: data[f.name] for f in dataclasses.fields(ByHandRun)})


def gold_and_empty_by_hand(images: dict[str, str], instances: dict[str, Instance]) -> dict[str, dict[str, ByHandRun]]:
    """instance_id -> {"gold": run, "empty": run}, swebench's procedure by hand, two at a time."""
    work = [(i, kind) for i in images for kind in ("gold", "empty")]

    def one(item: tuple[str, str]) -> ByHandRun:
        i, kind = item
        return run_by_hand(images[i], instances[i], instances[i].patch if kind == "gold" else "")

    with ThreadPoolExecutor(max_workers=2) as pool:
        runs = list(pool.map(one, work))
    out: dict[str, dict[str, ByHandRun]] = {}
    for (i, kind), run in zip(work, runs, strict=True):
        out.setdefault(i, {})[kind] = run
    return out


def by_hand_verdicts_of(
    runs: dict[str, dict[str, ByHandRun]], instances: dict[str, Instance]
) -> dict[str, dict[str, dict[str, Any]]]:
    """instance_id -> {"gold"|"empty": {"resolved", "tests_status"}} by swebench's ``get_eval_report``:
    the reference an anyswe run of gold / noop must equal."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for i, kinds in runs.items():
        for kind, run in kinds.items():
            report = sb.eval_report(instances[i], run.output, model_patch=run.patch)
            out.setdefault(i, {})[kind] = {"resolved": report["resolved"], "tests_status": report["tests_status"]}
    return out


def _whole(instance: Instance, run: ByHandRun) -> bool:
    """The eval ran to its end marker, and swebench's log parser found every PASS_TO_PASS test in the
    marked span (passing or not: a few fail on gold here, test_real_images's GOLD_FAILS). Those tests
    run before the fix and after it, so one missing from either run means the run was cut short."""
    from swebench.harness.log_parsers import MAP_REPO_TO_PARSER

    if sb.START_TEST_OUTPUT not in run.output or sb.END_TEST_OUTPUT not in run.output:
        return False
    span = run.output.split(sb.START_TEST_OUTPUT)[1].split(sb.END_TEST_OUTPUT)[0]
    # swebench's own parser and test spec (the private helper: the reference side reads swebench raw).
    seen = MAP_REPO_TO_PARSER[instance.repo](span, sb._test_spec(instance))
    return set(instance.PASS_TO_PASS) <= set(seen)


def _run_by_hand(image: str, patch: str, text: str) -> ByHandRun:
    started = docker("run", "-d", "--network", "none", "--entrypoint", "sleep", image, "infinity")
    assert started.returncode == 0, started.stderr
    container = started.stdout.strip()
    try:
        applied, apply_output = True, ""
        if patch:
            put = docker("exec", "-i", container, "/bin/bash", "-c", "cat > /tmp/patch.diff", stdin=patch)
            assert put.returncode == 0, put.stderr
            r = docker("exec", "-w", "/testbed", container, "git", "apply", "-v", "/tmp/patch.diff")
            applied, apply_output = r.returncode == 0, r.stdout + r.stderr
        put = docker("exec", "-i", container, "/bin/bash", "-c", "cat > /eval.sh", stdin=text)
        assert put.returncode == 0, put.stderr
        t0 = time.monotonic()
        with tempfile.TemporaryFile("w+") as out:
            subprocess.run(
                ["docker", "exec", container, "/bin/bash", "/eval.sh"],
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=EVAL_TIMEOUT,
                check=False,
            )
            seconds = time.monotonic() - t0
            out.seek(0)
            output = out.read()
        return ByHandRun(patch, applied, apply_output, output, seconds)
    finally:
        docker("rm", "-f", container)


def apply_spec(spec: Path, run_dir: Path, *sets: str) -> dict[tuple[str, str, str], TaskResult]:
    """``anyswe apply`` as a user runs it (``sets``: its ``--set`` overrides); (agent, provider,
    instance_id) -> the row of its one attempt."""
    overrides = [arg for a in sets for arg in ("--set", a)]
    r = subprocess.run(
        [*ANYSWE, "apply", str(spec), "--out", str(run_dir), *overrides], capture_output=True, text=True, timeout=5400
    )
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    rows = read_results(run_dir / "results.jsonl")
    found = {(row.agent, row.provider, row.instance_id): row for row in rows}
    assert len(found) == len(rows), "no task ran twice (the spec allows one attempt)"
    return found


def task_report(run_dir: Path, row: TaskResult) -> dict[str, Any]:
    """The ``report.json`` a run wrote for ``row``'s task (swebench's shape), its instance's entry."""
    return dict(json.loads((run_dir / "tasks" / row.key / "report.json").read_text())[row.instance_id])


# -- the gold census ---------------------------------------------------------------------------------
# The census of every real tier (--passes 2, both runtimes) is `just census` (scripts/census.py), run
# before an issue that touches images, grading, a benchmark or a runtime is resolved; CI runs the
# command itself on the demo rows (tests/e2e/test_gold_check.py) and on one real instance.


def census_cli(spec: Path, root: Path, *sets: str, passes: int = 1) -> str:
    """``anyswe gold-check`` as a user runs it, ``passes`` passes per provider, into ``root/census`` (the
    exclusion list: ``root/exclusions.yaml``); ``sets``: its ``--set`` overrides; what it printed."""
    overrides = [arg for a in sets for arg in ("--set", a)]
    argv = [*ANYSWE, "gold-check", str(spec), "--passes", str(passes), "--run-dir", str(root / "census"), *overrides]
    r = subprocess.run([*argv, "-o", str(root / "exclusions.yaml")], capture_output=True, text=True, timeout=5400)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    return r.stdout


def census_empty(census: Path) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """(instance_id, provider) -> the census's empty passes (each one's verdict and tests' statuses), in pass order."""
    out: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for e in sorted(map(json.loads, (census / "empty.jsonl").read_text().splitlines()), key=lambda e: e["pass"]):
        out.setdefault((e["instance_id"], e["provider"]), []).append(e)
    return out


def assert_census(
    census: Path,
    ids: tuple[str, ...],
    providers: tuple[str, ...],
    printed: str,
    broken: dict[str, set[str]] | None = None,
    passes: int = 1,
) -> None:
    """Every instance in its bucket on every provider, ``passes`` gold and empty passes as its evidence:
    supported, or (``broken``: instance -> the tests gold fails) broken and excluded with those tests."""
    from anyswe.datasets.exclusions import read_exclusions

    broken = broken or {}
    evidence = {(e["instance_id"], e["provider"]): e for e in map(json.loads, (census / "census.jsonl").open())}
    assert sorted(evidence) == sorted((i, p) for i in ids for p in providers)
    for (iid, provider), entry in evidence.items():
        if iid in broken:
            expected = ("broken", ["unresolved"] * passes, ["unresolved"] * passes, broken[iid])
        else:
            expected = ("supported", ["resolved"] * passes, ["unresolved"] * passes, set())
        assert (entry["bucket"], entry["gold"], entry["empty"], set(entry["failing"])) == expected, (iid, provider)
    found = read_exclusions(census.parent / "exclusions.yaml")
    assert sorted(found.checked_on) == sorted(providers) and found.passes == passes
    assert {e.instance_id: {p: set(t) for p, t in e.failing.items()} for e in found.exclude} == {
        i: dict.fromkeys(providers, tests) for i, tests in broken.items()
    }
    assert printed.count("supported") >= len(ids) - len(broken), printed
