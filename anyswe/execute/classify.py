"""What a task's phases gave, made into its :class:`~anyswe.execute.outcome.Outcome` and its files.

The phases (execute/task.py) fill a :class:`Trace` (times, the failure that ended them, the caps
hit) and an :class:`AgentRun`; :func:`classify` turns them, with the verdict, into the outcome's
record and failures once. :func:`failed_output` is the output of a task that never started (its
model could not be set up, its node died), whoever found that out.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import importlib.metadata
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from anyswe._proc import MAX_OUTPUT_BYTES
from anyswe.agents.base import AgentOutcome
from anyswe.execute import record as rec
from anyswe.execute.outcome import Exit, Outcome, Usage
from anyswe.execute.unit import TaskOutput
from anyswe.grading.flags import patch_flags
from anyswe.results.schema import TIME_FIELDS, ErrorKind, Failure, FailureSource, TaskResult

if TYPE_CHECKING:
    from anyswe.execute.unit import WorkUnit
    from anyswe.grading import Verdict
    from anyswe.sandbox.provider import Provenance


@dataclass
class AgentRun:
    """What the agent phase gives: the outcome, whether the host stopped it, and its own error."""

    outcome: AgentOutcome
    timed_out: bool = False
    error: str | None = None

    def fail(self, error: str) -> None:
        """Add a failure of the agent's own (its patch could not be captured, or is too large)."""
        self.error = error if self.error is None else f"{self.error}; {error}"


@dataclass
class Trace:
    """Times and the failure of one task, filled in as its phases run."""

    error_kind: ErrorKind | None = None
    error: str | None = None
    error_permanent: bool = False
    log_lines: list[str] = field(default_factory=list)
    #: The agent's patch's size, and the cap that decided the task (None: none did).
    patch_bytes: int | None = None
    limit_hit: str | None = None
    #: The paths the image's work tree changes from its HEAD (None: no sandbox got that far).
    image_changes: list[str] | None = None
    #: Seconds per phase, unrounded. Each lap runs from the end of the one before, so the phases
    #: partition the task's wall time: a step between two named phases is never in none of them.
    laps: dict[str, float] = field(default_factory=dict)
    _mark: float = field(default_factory=time.monotonic)

    def lap(self, name: str) -> None:
        """Charge the time since the last lap to phase ``name`` (added, for a phase entered twice)."""
        now = time.monotonic()
        self.laps[name] = self.laps.get(name, 0.0) + now - self._mark
        self._mark = now

    def close(self) -> None:
        """Charge what is left (a failure's cleanup: stopping the sandbox) to the phase it followed."""
        self.lap(next(reversed(self.laps), "time_image"))

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Charge the block, with any step since the last lap, to ``name`` (also when it raises)."""
        try:
            yield
        finally:
            self.lap(name)

    @property
    def times(self) -> dict[str, float]:
        """The row's ``time_*`` fields: each phase that ran, and ``time_total``, their sum."""
        if not self.laps:  # no phase ran: the task never started
            return {}
        out = {name: round(t, 3) for name, t in self.laps.items()}
        out["time_total"] = round(sum(self.laps.values()), 3)
        return out


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def failed_output(
    unit: WorkUnit, error_kind: ErrorKind, error: str, source: FailureSource = "task", *, permanent: bool = False
) -> TaskOutput:
    """The output of a task that could not even start (its model could not be set up, a dead node), its
    failure stated by ``source``."""
    outcome = classify(unit, Trace(), None, "", None, image=None, started_at=now())
    outcome = outcome.failed(Failure(kind=error_kind, source=source, message=error, permanent=permanent))
    return TaskOutput(outcome, artifacts(outcome.row(), Trace(), None))


@functools.cache
def _swebench_version() -> str | None:
    """The installed swebench's version, read from its metadata (importing swebench is slow)."""
    try:
        return importlib.metadata.version("swebench")
    except importlib.metadata.PackageNotFoundError:
        return None


def classify(
    unit: WorkUnit,
    trace: Trace,
    run: AgentRun | None,
    patch: str,
    verdict: Verdict | None,
    *,
    image: str | None,
    started_at: str,
    provenance: Provenance | None = None,
) -> Outcome:
    """The task's outcome from what the phases returned: its facts and its own failures (the row's
    verdict, reward and mask are :func:`~anyswe.execute.decide.decide`'s, read by ``Outcome.row``)."""
    outcome = run.outcome if run is not None else AgentOutcome()
    check = verdict.check if verdict is not None else None  # the tests' record against their log
    record = rec.Record(
        identity=_identity(unit),
        provenance=rec.Provenance(
            image=image,
            image_digest=provenance.digest if provenance else None,
            image_source_digest=provenance.source_digest if provenance else None,
            swebench_version=_swebench_version(),
            eval_script_sha256=hashlib.sha256(verdict.eval_script.encode()).hexdigest() if verdict else None,
            image_changes=trace.image_changes,
        ),
        patch=rec.PatchFacts(
            model_patch=patch,
            patch_exists=bool(verdict and verdict.patch_exists),
            patch_applied=bool(verdict and verdict.patch_applied),
            applied_by=verdict.applied_by if verdict else None,
            tests_timed_out=bool(verdict and verdict.tests_timed_out),
            patch_bytes=trace.patch_bytes,
            flags=patch_flags(patch, unit.instance.test_patch) + (check.flags if check else []),
            test_record=check.record if check else None,
            tamper=check.findings() if check else None,
            tamper_policy=unit.tamper_policy,
        ),
        limits=_limits(unit, trace, verdict),
        timings=rec.Timings(
            started_at=started_at, finished_at=now(), **{k: v for k, v in trace.times.items() if k in TIME_FIELDS}
        ),
    )
    return Outcome(
        record=record,
        tests_resolved=bool(verdict and verdict.resolved),
        exit=Exit(outcome.exit_reason, run.timed_out, "host" if run.timed_out else "agent") if run else Exit(),
        usage=Usage(**dataclasses.asdict(outcome.usage), trajectory_path=outcome.trajectory_path),
        failures=_failures(trace, run, verdict),
    )


def _identity(unit: WorkUnit) -> rec.Identity:
    return rec.Identity(
        key=unit.key,
        cell=unit.cell.id,
        agent=unit.cell.agent,
        model=unit.cell.model,
        provider=unit.cell.provider,
        provider_type=unit.provider.type,
        instance_id=unit.instance.instance_id,
        repo=unit.instance.repo,
        sample=unit.sample,
        attempt=unit.attempt,
        spec=unit.spec_name,
        run_id=unit.run_id,
        harness=unit.harness,
    )


def _failures(trace: Trace, run: AgentRun | None, verdict: Verdict | None) -> tuple[Failure, ...]:
    """The task's own failures: the one that ended its phases, else the agent's, and a patch grading refused."""
    failures = []
    if trace.error_kind is not None:
        failures.append(
            Failure(kind=trace.error_kind, source="task", message=trace.error or "", permanent=trace.error_permanent)
        )
    elif run is not None and run.error is not None:
        failures.append(Failure(kind="agent", source="task", message=run.error))
    if verdict is not None and verdict.error is not None and trace.error_kind in (None, "agent"):
        failures.append(Failure(kind="agent", source="task", message=verdict.error))
    return tuple(failures)


def _limits(unit: WorkUnit, trace: Trace, verdict: Verdict | None) -> rec.Limits:
    """The caps in force and the one that decided the task, if any."""
    over_output = verdict is not None and verdict.output_over_cap
    return rec.Limits(
        max_patch_bytes=unit.max_patch_bytes,
        max_output_bytes=MAX_OUTPUT_BYTES,
        limit_hit=trace.limit_hit or ("eval_output_bytes" if over_output else None),
    )


def artifacts(result: TaskResult, trace: Trace, verdict: Verdict | None) -> dict[str, str]:
    """The task's files for the run directory (the driver writes them)."""
    files = {
        "patch.diff": result.model_patch,
        "agent.log": "\n".join(trace.log_lines) + "\n" if trace.log_lines else "",
    }
    if verdict is not None:
        files["eval.sh"] = verdict.eval_script
        files["test_output.txt"] = verdict.test_output
        files["apply.log"] = verdict.apply_log
        files["report.json"] = json.dumps(verdict.report(result.instance_id), indent=2) + "\n"
    if result.error:
        files["error.txt"] = result.error + "\n"
    return files
