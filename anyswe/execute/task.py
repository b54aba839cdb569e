"""One unit of work, start to finish, in phases that each return a value:

image -> sandbox + agent (timeout) -> patch capture -> fresh sandbox + grade -> classify.

The result is assembled once, at the end, whatever happened: an infrastructure failure (runtime,
image, sandbox) is ``error_kind="infra"``; the agent's own failure is ``"agent"``; a grading
failure is ``"grading"``; a bug in anyswe is ``"internal"``. What that means for the verdict,
reward and mask is decided in execute/decide.py. Nothing here writes files: the artefacts travel
in the output.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import hashlib
import importlib.metadata
import json
import shutil
import time
import traceback
from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from anyswe._files import task_state_dir
from anyswe._proc import MAX_OUTPUT_BYTES
from anyswe._threads import in_thread
from anyswe.agents import AgentContext, AgentOutcome, ExitReason
from anyswe.errors import GradingError, InfraError, SandboxOutOfMemory
from anyswe.execute.capture import PatchCaptureFailed, capture_patch
from anyswe.execute.grade import grade_in_sandbox, stopped_on_failure
from anyswe.execute.outcome import Exit, Outcome, Usage
from anyswe.execute.seal import SealedImages, check_starting_point, seal_repository
from anyswe.execute.unit import TaskOutput
from anyswe.grading import get_harness
from anyswe.grading.flags import patch_flags
from anyswe.grading.swebench import touched_files
from anyswe.results.schema import TIME_FIELDS, ErrorKind, Failure, FailureSource, TaskResult
from anyswe.sandbox import SandboxRequest
from anyswe.sandbox.provider import Provenance
from anyswe.sandbox.reap import end_strays

if TYPE_CHECKING:
    from anyswe.agents import Agent
    from anyswe.datasets.instance import Instance
    from anyswe.execute.unit import WorkUnit
    from anyswe.execute.worker import Worker
    from anyswe.grading import Harness, Verdict
    from anyswe.sandbox import Sandbox, SandboxProvider


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
class _Trace:
    """Times and the failure of one task, filled in as its phases run."""

    error_kind: ErrorKind | None = None
    error: str | None = None
    error_permanent: bool = False
    log_lines: list[str] = field(default_factory=list)
    #: The agent's patch's size, and the cap that decided the task (None: none did).
    patch_bytes: int | None = None
    limit_hit: str | None = None
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


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


# -- phases ---------------------------------------------------------------------------------------


async def run_agent(agent: Agent, ctx: AgentContext, timeout: float) -> AgentRun:
    """The agent phase: its own failures are recorded (its work is still graded); infra errors propagate."""
    try:
        outcome = await asyncio.wait_for(agent.run(ctx), timeout)
        # An agent stopped at its deadline inside the sandbox timed out as surely as one the host stopped.
        return AgentRun(outcome, timed_out=outcome.exit_reason == ExitReason.TIMEOUT)
    except TimeoutError:
        return AgentRun(AgentOutcome(exit_reason=ExitReason.TIMEOUT), timed_out=True)
    except InfraError:
        raise
    except Exception as exc:
        ctx.log(traceback.format_exc())
        return AgentRun(AgentOutcome(exit_reason=ExitReason.ERROR), error=f"{type(exc).__name__}: {exc}")


async def work(
    unit: WorkUnit,
    agent: Agent,
    harness: Harness,
    sandbox: Sandbox[Any],
    trace: _Trace,
    state_dir: Path,
    seals: SealedImages,
    image_key: Hashable | None,
) -> tuple[AgentRun, str]:
    """Seal check, agent, then patch capture, in the task's sandbox (``image_key``: what the seal
    check's finding is remembered under; None for a sandbox whose repository is not the image's)."""
    ctx = AgentContext(
        sandbox=sandbox,
        task=unit.instance.agent_view(),
        workdir=harness.workdir,
        timeout=unit.agent_timeout,
        model=unit.endpoint,
        reference_patch=unit.instance.patch if agent.needs_reference else None,
        state_dir=state_dir,
        log_lines=trace.log_lines,
    )
    base = unit.instance.base_commit
    with trace.phase("time_seal"):
        check = functools.partial(seal_repository, sandbox, harness.workdir, base)
        seal = await seals.check(image_key, check)
        if seal.finding != "sealed":
            trace.log_lines.append(f"repository before the agent: {seal.finding}")
        # Computed here, on the host: neither patch ever enters the agent's sandbox.
        check_starting_point(seal, base, forbidden_files(unit.instance), harness.workdir)
    if seal.commits:
        trace.log_lines.append(f"starting point: {seal.head}, {len(seal.commits)} commit(s) after the base {base}")
    with trace.phase("time_agent"):
        run = await run_agent(agent, ctx, unit.agent_timeout)
    try:
        return run, await _after_agent(unit, agent, harness, sandbox, trace, run, seal.head)
    except SandboxOutOfMemory as exc:
        # Its own memory limit ended the sandbox: the agent's failure, unresolved, not masked (the
        # agent may have seen it already, through a command that could not run).
        if run.error is None or type(exc).__name__ not in run.error:
            run.fail(f"{type(exc).__name__}: {exc}")
        return run, ""


async def _after_agent(
    unit: WorkUnit, agent: Agent, harness: Harness, sandbox: Sandbox[Any], trace: _Trace, run: AgentRun, head: str
) -> str:
    """The agent's sandbox once it is done: alive?, its leftovers ended, its patch captured."""
    with trace.phase("time_settle"):
        # A sandbox killed under the agent makes its failure (or its submission) no result of its own.
        await sandbox.check_alive("the agent's work", settle=2 if run.error or run.timed_out else 0)
        # What the agent left running (a daemon, a fork bomb out of its group) ends here: it could change
        # the repository under the capture, or hold every pid so that the capture's failure looked infra.
        if ended := await end_strays(sandbox):
            trace.log_lines.append(f"ended {ended} process(es) the agent left running")
    patch = run.outcome.submitted_patch
    with trace.phase("time_patch_capture"):
        if patch is None:
            try:
                patch = await capture_patch(sandbox, harness.workdir, head, agent.capture_excludes)
            except PatchCaptureFailed as exc:
                await sandbox.check_alive("the patch capture", settle=2)  # a sandbox lost is not the agent's
                run.fail(f"{type(exc).__name__}: {exc}")
                patch = ""
        return patch_within_cap(unit, run, patch, trace)


def patch_within_cap(unit: WorkUnit, run: AgentRun, patch: str, trace: _Trace) -> str:
    """The patch to grade. One over ``unit.max_patch_bytes`` is the agent's failure (unresolved, not
    masked), neither graded nor kept: a 100 MB patch made a 131 MB results line."""
    trace.patch_bytes = size = len(patch.encode())
    if size <= unit.max_patch_bytes:
        return patch
    # Captured through one command: past the output cap its text came back cut, so the size is a floor.
    more = " or more" if size > MAX_OUTPUT_BYTES else ""
    error = f"PatchTooLarge: the patch is {size} bytes{more}, over the {unit.max_patch_bytes}-byte cap"
    run.fail(error)
    trace.limit_hit = "max_patch_bytes"
    trace.log_lines.append(f"{error} (limits.max_patch_bytes): not graded, not kept")
    return ""


async def grade(unit: WorkUnit, provider: SandboxProvider[Any], image: str, harness: Harness, patch: str) -> Verdict:
    """The grading phase, in a fresh sandbox: nothing the agent did outside its patch reaches the tests."""
    instance, timeout = unit.instance, unit.grading_timeout
    return await grade_in_sandbox(
        provider, image, instance, harness, patch, timeout=timeout, run_id=unit.run_id, task_id=unit.key
    )


def forbidden_files(instance: Instance) -> set[str]:
    """The files the reference and the test patch touch: commits after the base must leave them alone."""
    return touched_files(instance.patch or "") | touched_files(instance.test_patch or "")


def _image_key(sandbox: Sandbox[Any], workdir: str, base: str) -> Hashable | None:
    """What identifies the repository a sandbox starts with: exactly what it was started from (None
    if its provider cannot tell, or if something is mounted in or over the repository, which then is
    not the image's alone)."""
    repo = workdir.rstrip("/") + "/"
    targets = [m.target.rstrip("/") + "/" for m in sandbox.request.mounts]
    if sandbox.image_identity is None or any(t.startswith(repo) or repo.startswith(t) for t in targets):
        return None
    return (sandbox.image_identity, workdir, base)


# -- the task -------------------------------------------------------------------------------------


async def run_task(unit: WorkUnit, worker: Worker) -> TaskOutput:
    """Run one unit of work; never raises for a task's own failure (it is in the result)."""
    trace = _Trace()
    started = _now()
    image: str | None = None
    provenance = Provenance()
    run: AgentRun | None = None
    patch = ""
    verdict: Verdict | None = None
    try:
        provider, agent, harness = worker.provider(unit), worker.agent(unit), get_harness(unit.harness)
        with trace.phase("time_image"):
            image = await worker.images.image_for(provider, unit.image, unit.instance)
            provenance = await worker.images.provenance(provider, image)
        state_dir = task_state_dir()  # removed once its sandbox is gone
        remove_state = functools.partial(shutil.rmtree, state_dir, True)
        try:
            with trace.phase("time_sandbox_start"):
                request = SandboxRequest(image, run_id=unit.run_id, task_id=unit.key, phase="agent")
                # An agent may need more of its sandbox (its bundle, the gateway): building a bundle takes a while.
                request = await in_thread(agent.sandbox_request, request, model=unit.endpoint, state_dir=state_dir)
                sandbox = await provider.start(request)
        except BaseException:
            remove_state()
            raise
        with stopped_on_failure(sandbox, remove_state):
            key = _image_key(sandbox, harness.workdir, unit.instance.base_commit)
            run, patch = await work(unit, agent, harness, sandbox, trace, state_dir, worker.seals, key)
        with trace.phase("time_grading"):
            # The grading sandbox starts while the agent's is being removed.
            provider.stop_later(sandbox, remove_state)
            verdict = await grade(unit, provider, image, harness, patch)
    except InfraError as exc:
        trace.error_kind, trace.error = "infra", f"{type(exc).__name__}: {exc}"
        trace.error_permanent = exc.permanent
    except GradingError as exc:
        trace.error_kind, trace.error = "grading", f"{type(exc).__name__}: {exc}"
    except Exception:  # a bug in anyswe must not stop the other tasks; the task runs again next time
        trace.error_kind, trace.error = "internal", traceback.format_exc()
    trace.close()
    outcome = classify(unit, trace, run, patch, verdict, image=image, started_at=started, provenance=provenance)
    files = artifacts(outcome.row(), trace, verdict)
    if run is not None:
        files.update({f"agent-{name}": text for name, text in run.outcome.artifacts.items()})
    return TaskOutput(outcome, files)


def failed_output(
    unit: WorkUnit, error_kind: ErrorKind, error: str, source: FailureSource = "task", *, permanent: bool = False
) -> TaskOutput:
    """The output of a task that could not even start (its model could not be set up, a dead node), its
    failure stated by ``source``."""
    outcome = classify(unit, _Trace(), None, "", None, image=None, started_at=_now())
    outcome = outcome.failed(Failure(kind=error_kind, source=source, message=error, permanent=permanent))
    return TaskOutput(outcome, artifacts(outcome.row(), _Trace(), None))


@functools.cache
def _swebench_version() -> str | None:
    """The installed swebench's version, read from its metadata (importing swebench is slow)."""
    try:
        return importlib.metadata.version("swebench")
    except importlib.metadata.PackageNotFoundError:
        return None


def classify(
    unit: WorkUnit,
    trace: _Trace,
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
    failures = []
    if trace.error_kind is not None:
        failures.append(
            Failure(kind=trace.error_kind, source="task", message=trace.error or "", permanent=trace.error_permanent)
        )
    elif run is not None and run.error is not None:
        failures.append(Failure(kind="agent", source="task", message=run.error))
    if verdict is not None and verdict.error is not None and trace.error_kind in (None, "agent"):
        failures.append(Failure(kind="agent", source="task", message=verdict.error))
    outcome = run.outcome if run is not None else AgentOutcome()
    record: dict[str, Any] = {
        "key": unit.key,
        "cell": unit.cell.id,
        "agent": unit.cell.agent,
        "model": unit.cell.model,
        "provider": unit.cell.provider,
        "provider_type": unit.provider.type,
        "instance_id": unit.instance.instance_id,
        "repo": unit.instance.repo,
        "sample": unit.sample,
        "attempt": unit.attempt,
        "spec": unit.spec_name,
        "run_id": unit.run_id,
        "harness": unit.harness,
        "image": image,
        "image_digest": provenance.digest if provenance else None,
        "image_source_digest": provenance.source_digest if provenance else None,
        "swebench_version": _swebench_version(),
        "eval_script_sha256": hashlib.sha256(verdict.eval_script.encode()).hexdigest() if verdict else None,
        "started_at": started_at,
        "finished_at": _now(),
        "patch_exists": bool(verdict and verdict.patch_exists),
        "patch_applied": bool(verdict and verdict.patch_applied),
        "applied_by": verdict.applied_by if verdict else None,
        "tests_timed_out": bool(verdict and verdict.tests_timed_out),
        "model_patch": patch,
        **_patch_facts(unit, trace, verdict, patch),
        **{name: trace.times.get(name) for name in TIME_FIELDS},
    }
    return Outcome(
        record=record,
        tests_resolved=bool(verdict and verdict.resolved),
        exit=Exit(outcome.exit_reason, run.timed_out, "host" if run.timed_out else "agent") if run else Exit(),
        usage=Usage(**dataclasses.asdict(outcome.usage), trajectory_path=outcome.trajectory_path),
        failures=tuple(failures),
    )


def _patch_facts(unit: WorkUnit, trace: _Trace, verdict: Verdict | None, patch: str) -> dict[str, Any]:
    """The row's record of the caps in force and the one that decided the task, if any, and the
    patch's reward-hacking flags (grading/flags.py: facts, never a change of the verdict)."""
    over_output = verdict is not None and verdict.output_over_cap
    return {
        "patch_bytes": trace.patch_bytes,
        "max_patch_bytes": unit.max_patch_bytes,
        "max_output_bytes": MAX_OUTPUT_BYTES,
        "limit_hit": trace.limit_hit or ("eval_output_bytes" if over_output else None),
        "flags": patch_flags(patch, unit.instance.test_patch),
    }


def artifacts(result: TaskResult, trace: _Trace, verdict: Verdict | None) -> dict[str, str]:
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
