"""``anyswe gold-check``: a gold census. Which instances the grader resolves with the reference patch,
every time, on every provider, and whose tests fail without it.

The gold agent runs over the spec's instances on each of its providers, ``passes`` times, as an
ordinary anyswe run (resumable, in its own run directory); the tests also run ``passes`` times on
each provider with no patch at all (the *empty* passes, kept in ``empty.jsonl`` there, resumed
too). Each instance is then put, per provider, in a bucket, with each pass's evidence (``census.jsonl``
in the run directory):

* **supported**: every gold pass resolves and no empty pass does;
* **broken**: no gold pass resolves, or every empty pass does (the tests do not tell a fix apart);
* **flaky**: anything between (gold resolves on some passes only, or the tests pass without the fix
  on some);
* **no-verdict**: a pass ended without one (an infrastructure error, the grader, a timeout): it says
  nothing about the instance; apply again.

Broken and flaky instances go into an exclusion list, with the failing tests per provider; a spec
names that list (``dataset.exclude_file``) so they are left out on every backend alike, and
``anyswe results RUN --over LIST`` gives rates over the supported set of a run made without it.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from anyswe.datasets.exclusions import ExcludedInstance, ExclusionList
from anyswe.errors import AnysweError, PlanError

if TYPE_CHECKING:
    from anyswe.execute.local import RunSummary
    from anyswe.plan import Plan
    from anyswe.results.schema import TaskResult
    from anyswe.spec import Spec

BUCKETS = ("supported", "flaky", "broken", "no-verdict")


@dataclass
class Census:
    """One instance on one provider: each pass's evidence, and the bucket they put it in."""

    #: Per gold pass: "resolved", "unresolved" or "error: ..." (no verdict).
    gold: list[str] = field(default_factory=list)
    #: Per empty pass: "resolved" (the tests pass without the fix), "unresolved" or "error: ...".
    empty: list[str] = field(default_factory=list)
    #: The tests that failed in some gold pass (or why it did not apply).
    failing: list[str] = field(default_factory=list)

    @property
    def bucket(self) -> str:
        if any(v.startswith("error") for v in (*self.gold, *self.empty)) or not self.gold or not self.empty:
            return "no-verdict"
        gold_ok, empty_ok = self.gold.count("resolved"), self.empty.count("resolved")
        if gold_ok == 0 or empty_ok == len(self.empty):
            return "broken"
        if gold_ok < len(self.gold) or empty_ok:
            return "flaky"
        return "supported"

    def why(self) -> str:
        """What put it in its bucket, in words (an exclusion's reason)."""
        if self.bucket == "broken" and "resolved" not in self.gold:
            return "gold patch does not resolve"
        if self.bucket == "broken":
            return "tests pass without the fix"
        return (
            f"flaky: gold resolved {self.gold.count('resolved')}/{len(self.gold)}, "
            f"without the fix {self.empty.count('resolved')}/{len(self.empty)}"
        )


@dataclass
class GoldCheck:
    """The census per instance and provider, and the exclusion list made from it."""

    run_dir: Path
    providers: list[str]
    passes: int = 1
    #: instance_id -> provider -> its census there
    census: dict[str, dict[str, Census]] = field(default_factory=dict)
    exclusions: ExclusionList = field(default_factory=ExclusionList)
    summary: RunSummary | None = None

    @property
    def outcome(self) -> dict[str, dict[str, str]]:
        """instance_id -> provider -> bucket."""
        return {i: {p: c.bucket for p, c in per.items()} for i, per in self.census.items()}

    @property
    def unchecked(self) -> list[tuple[str, str]]:
        """(instance, provider) pairs without a verdict (an infrastructure error): apply again."""
        return [(i, p) for i, per in self.outcome.items() for p, b in per.items() if b == "no-verdict"]

    def evidence(self) -> list[dict[str, Any]]:
        """Per instance and provider: its bucket and each pass's verdict (``census.jsonl``'s lines)."""
        return [
            {"instance_id": i, "provider": p, "bucket": c.bucket, "why": c.why() if c.bucket in ("flaky", "broken")
             else None, "gold": c.gold, "empty": c.empty, "failing": c.failing}
            for i, per in sorted(self.census.items())
            for p, c in sorted(per.items())
        ]  # fmt: skip

    def rows(self) -> list[dict[str, Any]]:
        out = []
        for i, per in sorted(self.census.items()):
            for p, c in sorted(per.items()):
                gold, empty = c.gold.count("resolved"), c.empty.count("resolved")
                out.append(
                    {"instance_id": i, "provider": p, "bucket": c.bucket, "gold": f"{gold}/{len(c.gold)}",
                     "without_fix": f"{empty}/{len(c.empty)}"}
                )  # fmt: skip
        return out


def gold_spec(spec: Spec, *, providers: list[str] | None = None, run_dir: Path | None = None, passes: int = 1) -> Spec:
    """``spec`` with the gold agent alone, ``passes`` samples, every instance (its exclusions lifted), on
    ``providers``."""
    from anyswe.agents.gold import GoldConfig
    from anyswe.spec import MatrixSpec

    chosen = providers or spec.matrix.providers or list(spec.providers)
    unknown = [p for p in chosen if p not in spec.providers]
    if unknown:
        raise PlanError(
            f"gold-check: unknown provider(s) {', '.join(unknown)}; the spec declares {', '.join(spec.providers)}"
        )
    name = f"{spec.name}-gold-check"
    return spec.model_copy(
        update={
            "name": name,
            "agents": {"gold": GoldConfig()},
            "models": {},
            "matrix": MatrixSpec(providers=chosen),
            "samples": passes,
            "dataset": spec.dataset.model_copy(update={"exclude": [], "exclude_file": None}),
            "output_dir": run_dir or spec.run_dir().parent / name,
        }
    )


def _failing_tests(task_dir: Path) -> list[str]:
    report = task_dir / "report.json"
    if not report.is_file():
        return []
    data = json.loads(report.read_text())
    out: list[str] = []
    for entry in data.values() if isinstance(data, dict) else []:
        status = entry.get("tests_status") or {}
        for kind in ("FAIL_TO_PASS", "PASS_TO_PASS"):
            out += list((status.get(kind) or {}).get("failure") or [])
    return out


async def gold_check_async(
    spec: Spec,
    *,
    providers: list[str] | None = None,
    run_dir: Path | None = None,
    concurrency: int | None = None,
    progress: bool = True,
    passes: int = 1,
) -> GoldCheck:
    """Run the census (resuming a previous one): ``passes`` gold and empty passes per instance and provider."""
    from anyswe.experiment import Experiment
    from anyswe.results.store import latest_attempts, read_results

    if passes < 1:
        raise PlanError(f"gold-check: passes must be at least 1, not {passes}")
    checked = gold_spec(spec, providers=providers, run_dir=run_dir, passes=passes)
    exp = Experiment(checked)
    summary = await exp.run_async(concurrency=concurrency, progress=progress)
    chosen = list(checked.matrix.providers or [])
    result = GoldCheck(run_dir=exp.run_dir, providers=chosen, passes=passes, summary=summary)
    planned = {t.key for t in exp.planned.tasks}
    for r in latest_attempts(read_results(exp.run_dir / "results.jsonl")):
        if r.key in planned:
            entry = result.census.setdefault(r.instance_id, {}).setdefault(r.provider, Census())
            verdict, failing = _gold_pass(r, exp.run_dir / "tasks" / r.key)
            entry.gold.append(verdict)
            entry.failing += [t for t in failing if t not in entry.failing]
    empty = await _empty_passes(
        exp.planned, chosen, passes, exp.run_dir / "empty.jsonl", concurrency or spec.concurrency
    )
    for (iid, provider), verdicts in empty.items():
        result.census.setdefault(iid, {}).setdefault(provider, Census()).empty = verdicts
    result.exclusions = _exclusions(result, exp.planned.dataset.name)
    # The buckets with their evidence, beside the gold run and empty.jsonl they were read from; rewritten
    # whole by each census (a resumed one sees every pass again).
    lines = "".join(json.dumps(e) + "\n" for e in result.evidence())
    tmp = exp.run_dir / "census.jsonl.tmp"
    tmp.write_text(lines)
    tmp.replace(exp.run_dir / "census.jsonl")
    return result


def _gold_pass(row: TaskResult, task_dir: Path) -> tuple[str, list[str]]:
    if row.error_kind in ("infra", "internal", "grading") or row.mask_sample:
        # No verdict on the instance: the infrastructure, the grader or a timeout got in the way.
        return f"error: {row.error_kind or 'masked (timeout)'}", []
    if row.resolved:
        return "resolved", []
    failing = _failing_tests(task_dir)
    return "unresolved", failing or ([] if row.patch_applied else ["(the gold patch did not apply)"])


async def _empty_passes(
    plan: Plan, providers: list[str], passes: int, record: Path, concurrency: int
) -> dict[tuple[str, str], list[str]]:
    """(instance, provider) -> each empty pass's verdict: the tests run with no patch (resumed from
    ``record``, one JSON line per pass with a verdict)."""
    from anyswe.execute.grade import grade_async
    from anyswe.images.resolve import ImageResolver
    from anyswe.sandbox import get_provider
    from anyswe.sandbox.slots import SharedBound

    done: dict[tuple[str, str, int], str] = {}
    if record.is_file():
        for line in record.read_text().splitlines():
            entry = json.loads(line)
            done[entry["instance_id"], entry["provider"], entry["pass"]] = entry["verdict"]
    made = {p: get_provider(plan.spec.providers[p].type, plan.spec.providers[p]) for p in providers}
    # An instance's passes come a provider at a time: each provider's bound is waited for first.
    resolver, bound, lock = ImageResolver(), SharedBound(concurrency), asyncio.Lock()

    async def one(iid: str, provider: str, n: int) -> None:
        instance = plan.dataset.by_id()[iid]
        async with bound.place(provider, made[provider].config.concurrency):
            try:
                verdict = await grade_async(
                    instance, "", made[provider], dataset=plan.dataset, images=resolver, unpatched=True,
                    timeout=plan.spec.timeouts.grading, harness=plan.spec.grading.harness,
                )  # fmt: skip
                said = "resolved" if verdict.resolved else "unresolved"
            except AnysweError as exc:  # no verdict: not written, so the next census runs it again
                done[iid, provider, n] = f"error: {type(exc).__name__}: {str(exc)[:200]}"
                return
        done[iid, provider, n] = said
        line = {"instance_id": iid, "provider": provider, "pass": n, "verdict": said,
                "tests_status": verdict.tests_status}  # fmt: skip
        async with lock:
            with record.open("a") as fh:
                fh.write(json.dumps(line) + "\n")

    todo = [
        (i.instance_id, p, n)
        for i in plan.instances
        for p in providers
        for n in range(passes)
        if not done.get((i.instance_id, p, n), "error").startswith(("resolved", "unresolved"))
    ]
    await asyncio.gather(*(one(*t) for t in todo))
    out: dict[tuple[str, str], list[str]] = {}
    for i in plan.instances:
        for p in providers:
            out[i.instance_id, p] = [done[i.instance_id, p, n] for n in range(passes)]
    return out


def _exclusions(result: GoldCheck, dataset: str) -> ExclusionList:
    entries = []
    for iid, per in sorted(result.census.items()):
        bad = {p: c for p, c in per.items() if c.bucket in ("flaky", "broken")}
        if not bad:
            continue
        reasons: dict[str, list[str]] = {}
        for p, c in sorted(bad.items()):
            reasons.setdefault(c.why(), []).append(p)
        reason = "; ".join(f"{why} on {', '.join(ps)}" for why, ps in reasons.items())
        entries.append(
            ExcludedInstance(
                instance_id=iid,
                reason=reason,
                failing={p: c.failing for p, c in bad.items()},
                census={p: c.bucket for p, c in per.items()},
            )
        )
    return ExclusionList(
        dataset=dataset, checked_on=result.providers, source=str(result.run_dir), passes=result.passes, exclude=entries
    )


__all__ = ["BUCKETS", "Census", "GoldCheck", "gold_check_async", "gold_spec"]
