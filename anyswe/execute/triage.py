"""``anyswe triage``: what a docker-vs-apptainer flip is, found by grading its patches again.

A flip is an (instance, sample) whose verdict differs between two cells that differ only in ``by``
(the provider, by default), on the verdicts the harness rate counts (:mod:`anyswe.results.tables`):
a side whose agent timed out or was stopped is a side with the verdict its tests gave, and only a
side with an infra, grading or internal error has none. A flip one of whose sides is masked for RL
says so (``rl_masked``): it is no flip of the RL rate. Both recorded patches are graded ``k`` more
times on each of the two backends with :func:`anyswe.grade` (a fresh sandbox each, as a run
grades), and the flip is:

- ``flaky``: a patch's verdict varies on one backend (the recorded verdict counts as one grade);
  the tests whose status varied are named;
- ``backend-systematic``: every patch grades the same each time on each backend, and some patch
  grades differently on the two; the tests that differ are named, with the first line of their
  failure;
- ``agent-variance``: the two samples' patches differ, and each grades the same everywhere;
- ``undetermined``: grading errors left a patch with no verdict on a backend.

Grades are appended (fsynced) to ``RUN/triage/grades.jsonl`` as they come, so a triage that stops
resumes where it was, and a larger ``k`` grades only what is missing. The table is written to
``RUN/triage/triage.json``; ``anyswe diff --exclude-flaky`` reads it.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from anyswe.errors import InfraError, ResultsError
from anyswe.results.store import cut_torn_tail

if TYPE_CHECKING:
    import polars as pl

    from anyswe.grading import Verdict
    from anyswe.plan import Plan
    from anyswe.results.compare import Comparison

TRIAGE_DIR = "triage"
GRADES = "grades.jsonl"
TABLE = "triage.json"
KINDS = ("flaky", "backend-systematic", "agent-variance", "undetermined")

#: One grade to make: (instance id, patch sha, provider, repetition).
Job = tuple[str, str, str, int]
#: (patch sha, provider): one patch on one backend.
Key = tuple[str, str]


@dataclass(frozen=True)
class Flip:
    """One flipped pair: the same instance and sample, resolved in one cell and not in the other."""

    instance_id: str
    sample: int
    cell_a: str
    cell_b: str
    provider_a: str
    provider_b: str
    patch_a: str
    patch_b: str
    resolved_a: bool
    resolved_b: bool
    #: Each side's RL mask reason (agent_timeout, forced_stop...), None when it is not masked.
    mask_reason_a: str | None = None
    mask_reason_b: str | None = None

    def rl_masked(self) -> dict[str, str]:
        """cell -> mask reason, for each side that the RL rate leaves out."""
        sides = ((self.cell_a, self.mask_reason_a), (self.cell_b, self.mask_reason_b))
        return {cell: reason for cell, reason in sides if reason is not None}


@dataclass
class Finding:
    """What a flip is (:data:`KINDS`), the tests behind it, and how many grades say so."""

    instance_id: str
    sample: int
    cell_a: str
    cell_b: str
    kind: str
    tests: list[str] = field(default_factory=list)
    #: test -> the first line of its failure (backend-systematic), or of the grading error.
    detail: dict[str, str] = field(default_factory=dict)
    #: "patch@provider" -> resolved verdicts, the recorded one first where there is one.
    verdicts: dict[str, list[bool]] = field(default_factory=dict)
    #: cell -> RL mask reason of a side the RL rate leaves out (so no flip there); empty for most.
    rl_masked: dict[str, str] = field(default_factory=dict)


@dataclass
class Triage:
    """Every flip of a run and what it is."""

    run_dir: Path
    findings: list[Finding] = field(default_factory=list)

    def rows(self) -> list[dict[str, Any]]:
        """One row per flip; an ``rl_masked`` column only when some flip has a side masked for RL."""
        shown = any(f.rl_masked for f in self.findings)
        return [
            {
                "instance_id": f.instance_id,
                "sample": f.sample,
                "cell_a": f.cell_a,
                "cell_b": f.cell_b,
                "kind": f.kind,
                "tests": ", ".join(f.tests),
            }
            | ({"rl_masked": ", ".join(f"{c}: {r}" for c, r in f.rl_masked.items())} if shown else {})
            for f in self.findings
        ]

    def flaky(self) -> set[str]:
        """Instances with a flaky flip: what ``anyswe diff --exclude-flaky`` leaves out."""
        return {f.instance_id for f in self.findings if f.kind == "flaky"}


def _sha(patch: str) -> str:
    return hashlib.sha256(patch.encode()).hexdigest()[:16]


def find_flips(tasks: pl.DataFrame, by: str = "provider", *, comparisons: list[Comparison] | None = None) -> list[Flip]:
    """Every flipped pair between cells that differ only in ``by``, samples without a verdict (an
    infra, grading or internal error) left out, samples masked only for RL kept. ``comparisons``:
    ``compare_by(tasks, by)`` if the caller has it (its bootstrap is most of the cost at 10,000 tasks)."""
    import polars as pl

    from anyswe.results.compare import compare_by
    from anyswe.results.tables import counted

    flips: list[Flip] = []
    has_verdict = counted(tasks)
    for comparison in compare_by(tasks, by) if comparisons is None else comparisons:
        a = tasks.filter(pl.col("cell") == comparison.a, has_verdict)
        b = tasks.filter(pl.col("cell") == comparison.b, has_verdict)
        joined = a.join(b, on=["instance_id", "sample"], suffix="_b").filter(pl.col("resolved") != pl.col("resolved_b"))
        for r in joined.sort(["instance_id", "sample"]).iter_rows(named=True):
            flips.append(
                Flip(
                    instance_id=r["instance_id"],
                    sample=r["sample"],
                    cell_a=comparison.a,
                    cell_b=comparison.b,
                    provider_a=r["provider"],
                    provider_b=r["provider_b"],
                    patch_a=r["model_patch"] or "",
                    patch_b=r["model_patch_b"] or "",
                    resolved_a=bool(r["resolved"]),
                    resolved_b=bool(r["resolved_b"]),
                    mask_reason_a=_mask_reason(r, ""),
                    mask_reason_b=_mask_reason(r, "_b"),
                )
            )
    return flips


def _mask_reason(row: dict[str, Any], suffix: str) -> str | None:
    """A side's RL mask reason; "masked" for a masked row from before reasons were recorded."""
    if not row[f"mask_sample{suffix}"]:
        return None
    return row.get(f"mask_reason{suffix}") or "masked"


def _statuses(verdict: Verdict) -> dict[str, str]:
    """test -> "pass" | "fail", over FAIL_TO_PASS and PASS_TO_PASS."""
    out: dict[str, str] = {}
    for buckets in verdict.tests_status.values():
        for name in buckets.get("success", []):
            out[name] = "pass"
        for name in buckets.get("failure", []):
            out[name] = "fail"
    return out


def _first_failure_line(output: str, test: str) -> str:
    """The first line of ``test``'s failure in a pytest log: the first ``E`` line of its section
    (``____ test_x ____``), else its short-summary line (which pytest cuts to the terminal's width)."""
    short = test.rsplit("::", 1)[-1]
    lines = output.splitlines()
    for n, line in enumerate(lines):
        if line.startswith("__") and line.rstrip("_ ").endswith(f" {short}"):
            for later in lines[n + 1 :]:
                if later.startswith("E "):
                    return later[1:].strip()[:300]
                if later.startswith("__"):
                    break
    return next((x.strip()[:300] for x in lines if ("FAILED" in x or "ERROR" in x) and short in x), "")


class GradeStore:
    """``grades.jsonl`` (or ``name``): one line per grade, appended and fsynced; one writer at a time (a lock file)."""

    def __init__(self, directory: Path, *, name: str = GRADES, what: str = "triaged") -> None:
        self.path = directory / name
        directory.mkdir(parents=True, exist_ok=True)
        self._lock = open(directory / ".lock", "a")  # noqa: SIM115 - held for the store's life
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            raise ResultsError(f"{directory} is being {what} by another process") from None
        cut_torn_tail(self.path)

    def rows(self) -> list[dict[str, Any]]:
        if not self.path.is_file():
            return []
        out = []
        for line in self.path.read_bytes().split(b"\n"):
            with contextlib.suppress(json.JSONDecodeError, UnicodeDecodeError):
                if line.strip():
                    out.append(json.loads(line))  # a torn last line (a crash mid-write) is skipped
        return out

    def append(self, row: dict[str, Any]) -> None:
        data = (json.dumps(row, sort_keys=True) + "\n").encode()
        with open(self.path, "ab") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())

    def close(self) -> None:
        self._lock.close()


async def _grade_one(plan: Plan, job: Job, patch: str, providers: dict[str, Any]) -> dict[str, Any]:
    from anyswe.execute.grade import grade_async

    instance_id, sha, provider, rep = job
    row: dict[str, Any] = {"instance_id": instance_id, "patch": sha, "provider": provider, "rep": rep}
    try:
        verdict = await grade_async(
            plan.instance(instance_id),
            patch,
            providers[provider],
            dataset=plan.dataset,
            harness=plan.spec.grading.harness,
            timeout=plan.spec.timeouts.grading,
        )
    except InfraError as exc:  # no verdict: this grade says nothing about the patch
        return row | {"resolved": None, "error": f"{type(exc).__name__}: {exc}"[:500]}
    statuses = _statuses(verdict)
    failures = {t: _first_failure_line(verdict.test_output, t) for t, s in statuses.items() if s == "fail"}
    return row | {"resolved": verdict.resolved, "tests": statuses, "failures": failures, "error": None}


def _jobs(flips: list[Flip], k: int, done: set[Job]) -> dict[Job, str]:
    """(instance, patch sha, provider, rep) -> patch: each distinct patch of a flip, k times on both backends."""
    jobs: dict[Job, str] = {}
    for f in flips:
        for patch in {f.patch_a, f.patch_b}:
            for provider in (f.provider_a, f.provider_b):
                for rep in range(k):
                    job = (f.instance_id, _sha(patch), provider, rep)
                    if job not in done:
                        jobs[job] = patch
    return jobs


def _groups(flip: Flip, grades: list[dict[str, Any]]) -> tuple[dict[Key, list[dict[str, Any]]], dict[Key, list[bool]]]:
    """The flip's grades and verdicts per (patch sha, provider); the recorded verdict comes first."""
    recorded = {(_sha(flip.patch_a), flip.provider_a): flip.resolved_a}
    recorded[(_sha(flip.patch_b), flip.provider_b)] = flip.resolved_b
    keys = [(_sha(p), v) for p in (flip.patch_a, flip.patch_b) for v in (flip.provider_a, flip.provider_b)]
    groups: dict[Key, list[dict[str, Any]]] = {key: [] for key in keys}
    for g in grades:
        if (g["patch"], g["provider"]) in groups:
            groups[(g["patch"], g["provider"])].append(g)
    verdicts = {
        key: ([recorded[key]] if key in recorded else []) + [g["resolved"] for g in gs if g["resolved"] is not None]
        for key, gs in groups.items()
    }
    return groups, verdicts


def classify(flip: Flip, grades: list[dict[str, Any]]) -> Finding:
    """What ``flip`` is, from its grades (rows of ``grades.jsonl``)."""
    finding = Finding(flip.instance_id, flip.sample, flip.cell_a, flip.cell_b, kind="undetermined")
    finding.rl_masked = flip.rl_masked()
    groups, verdicts = _groups(flip, grades)
    finding.verdicts = {f"{p}@{v}": vs for (p, v), vs in sorted(verdicts.items())}
    patches = sorted({p for p, _ in verdicts})
    a, b = flip.provider_a, flip.provider_b
    varying = [key for key, vs in verdicts.items() if len(set(vs)) > 1]
    if varying:
        finding.kind = "flaky"
        finding.tests = sorted({t for key in varying for t in _differing(groups[key])})
    elif any(not vs for vs in verdicts.values()):
        errors = [g["error"] for gs in groups.values() for g in gs if g.get("error")]
        finding.detail = {"grading error": errors[0] if errors else "no grade"}
    elif any(verdicts[(p, a)][0] != verdicts[(p, b)][0] for p in patches):
        finding.kind = "backend-systematic"
        for p in patches:
            # The first grade with a verdict on each side (a failed grade, resolved None, has no tests).
            graded = (next((g for g in groups[(p, v)] if g.get("tests") is not None), None) for v in (a, b))
            pair = [g for g in graded if g is not None]
            for test in sorted(_differing(pair)):
                if test not in finding.tests:
                    finding.tests.append(test)
                failed = next((g for g in pair if g["tests"].get(test) == "fail"), None)
                if failed is not None:
                    finding.detail[test] = f"{failed['provider']}: {failed['failures'].get(test) or '(failed)'}"
    elif len(patches) > 1:
        finding.kind = "agent-variance"
    return finding


def _differing(grades: list[dict[str, Any]]) -> set[str]:
    """Tests whose status is not the same in every one of ``grades``."""
    tests = {t for g in grades for t in g.get("tests") or {}}
    return {t for t in tests if len({(g.get("tests") or {}).get(t) for g in grades}) > 1}


async def triage_async(run_dir: str | Path, *, by: str = "provider", k: int = 5, concurrency: int = 4) -> Triage:
    """Grade every flipped pair's patches ``k`` times on each of its backends and say what each flip is."""
    from anyswe.plan import make_plan
    from anyswe.results.tables import task_frame
    from anyswe.sandbox import get_provider
    from anyswe.sandbox.slots import SharedBound
    from anyswe.spec import load_spec

    run = Path(run_dir)
    if k < 1:
        raise ResultsError(f"triage: k must be at least 1, not {k}")
    plan = make_plan(load_spec(run / "spec.yaml"))
    flips = find_flips(task_frame(run), by)
    providers = {name: get_provider(cfg.type, cfg) for name, cfg in plan.spec.providers.items()}
    store = GradeStore(run / TRIAGE_DIR)
    try:
        graded = [g for g in store.rows() if g["resolved"] is not None]
        done = {(g["instance_id"], g["patch"], g["provider"], g["rep"]) for g in graded}
        jobs = _jobs(flips, k, done)
        bound = SharedBound(concurrency)  # the jobs come a backend at a time

        async def one(job: Job, patch: str) -> None:
            async with bound.place(job[2], providers[job[2]].config.concurrency):
                store.append(await _grade_one(plan, job, patch, providers))

        await asyncio.gather(*(one(job, patch) for job, patch in jobs.items()))
        grades = store.rows()
    finally:
        store.close()
    result = Triage(run_dir=run)
    for flip in flips:
        ok = [g for g in grades if g["instance_id"] == flip.instance_id and g["rep"] < k]
        result.findings.append(classify(flip, ok))
    (run / TRIAGE_DIR / TABLE).write_text(json.dumps([asdict(f) for f in result.findings], indent=1) + "\n")
    return result


def triage(run_dir: str | Path, **options: Any) -> Triage:
    """:func:`triage_async` from synchronous code (a script, or a Jupyter cell)."""
    from anyswe._sync import run_sync

    return run_sync(triage_async(run_dir, **options))


def flaky_instances(path: str | Path) -> set[str]:
    """The flaky instances of a triage table (``triage.json``, or a run directory holding one)."""
    p = Path(path)
    table = p / TRIAGE_DIR / TABLE if p.is_dir() else p
    if not table.is_file():
        raise ResultsError(f"no triage table at {table} (run `anyswe triage` first)")
    try:
        rows = json.loads(table.read_text())
        return {r["instance_id"] for r in rows if r["kind"] == "flaky"}
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ResultsError(f"{table}: not a triage table ({exc})") from None
