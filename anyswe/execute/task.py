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
import functools
import shutil
import traceback
from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from anyswe._files import task_state_dir
from anyswe._proc import MAX_OUTPUT_BYTES
from anyswe._threads import in_thread
from anyswe.agents import AgentContext, AgentOutcome, ExitReason
from anyswe.errors import GradingError, InfraError, SandboxOverLimit
from anyswe.execute.capture import PatchCaptureFailed, capture_patch
from anyswe.execute.classify import AgentRun, Trace, artifacts, classify, now
from anyswe.execute.grade import grade_in_sandbox, stopped_on_failure
from anyswe.execute.seal import SealedImages, check_starting_point, seal_repository, write_baseline
from anyswe.execute.unit import TaskOutput
from anyswe.grading.diffs import touched_files
from anyswe.sandbox import SandboxRequest
from anyswe.sandbox.provider import Provenance
from anyswe.sandbox.reap import end_strays

if TYPE_CHECKING:
    from anyswe.agents import Agent
    from anyswe.datasets.instance import Instance
    from anyswe.execute.unit import WorkUnit
    from anyswe.grading import Harness, Verdict
    from anyswe.images.resolve import ImageResolver
    from anyswe.sandbox import Sandbox, SandboxProvider


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
    trace: Trace,
    state_dir: Path,
    seals: SealedImages,
    image_key: Hashable | None,
) -> tuple[AgentRun, str]:
    """Seal check, agent, then patch capture, in the task's sandbox (``image_key``: what the seal
    check's finding is remembered under; None for a sandbox whose repository is not the image's)."""
    ctx = AgentContext(
        sandbox=sandbox,
        task=unit.instance.agent_view(),
        workdir=unit.workdir,
        timeout=unit.agent_timeout,
        model=unit.endpoint,
        reference_patch=unit.instance.patch if agent.needs_reference else None,
        state_dir=state_dir,
        log_lines=trace.log_lines,
    )
    base = unit.instance.base_commit
    with trace.phase("time_seal"):
        check = functools.partial(seal_repository, sandbox, unit.workdir, base)
        seal = await seals.check(image_key, check)
        if seal.finding != "sealed":
            trace.log_lines.append(f"repository before the agent: {seal.finding}")
        # Computed here, on the host: neither patch ever enters the agent's sandbox.
        check_starting_point(seal, base, forbidden_files(unit.instance), unit.workdir)
        seal = await write_baseline(sandbox, unit.workdir, seal)
    trace.image_changes = list(seal.shipped) if seal.baseline else []
    if seal.baseline:
        shown = ", ".join(seal.shipped[:10]) + (" ..." if len(seal.shipped) > 10 else "")
        trace.log_lines.append(
            f"work tree as the image ships it: {len(seal.shipped)} path(s) changed from {seal.head} ({shown}), "
            "the baseline of the patch capture"
        )
    if seal.commits:
        trace.log_lines.append(f"starting point: {seal.head}, {len(seal.commits)} commit(s) after the base {base}")
    with trace.phase("time_agent"):
        run = await run_agent(agent, ctx, unit.agent_timeout)
    try:
        return run, await _after_agent(unit, agent, harness, sandbox, trace, run, seal.start)
    except SandboxOverLimit as exc:
        # Its own limit (memory, disk) ended the sandbox: the agent's failure, unresolved, not masked
        # (the agent may have seen it already, through a command that could not run).
        if run.error is None or type(exc).__name__ not in run.error:
            run.fail(f"{type(exc).__name__}: {exc}")
        return run, ""


async def _after_agent(
    unit: WorkUnit, agent: Agent, harness: Harness, sandbox: Sandbox[Any], trace: Trace, run: AgentRun, start: str
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
                patch = await capture_patch(sandbox, unit.workdir, start, agent.capture_excludes)
            except PatchCaptureFailed as exc:
                await sandbox.check_alive("the patch capture", settle=2)  # a sandbox lost is not the agent's
                run.fail(f"{type(exc).__name__}: {exc}")
                patch = ""
        return patch_within_cap(unit, run, patch, trace)


def patch_within_cap(unit: WorkUnit, run: AgentRun, patch: str, trace: Trace) -> str:
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


@dataclass(frozen=True)
class TaskTools:
    """What a task runs with, built by whoever runs it (the worker caches them across its units)."""

    provider: SandboxProvider[Any]
    agent: Agent
    harness: Harness
    images: ImageResolver
    seals: SealedImages


async def run_task(unit: WorkUnit, tools: TaskTools) -> TaskOutput:
    """Run one unit of work; never raises for a task's own failure (it is in the result)."""
    trace = Trace()
    started = now()
    image: str | None = None
    provenance = Provenance()
    run: AgentRun | None = None
    patch = ""
    verdict: Verdict | None = None
    try:
        provider, agent, harness = tools.provider, tools.agent, tools.harness
        with trace.phase("time_image"):
            image = await tools.images.image_for(provider, unit.image, unit.instance)
            provenance = await tools.images.provenance(provider, image)
        state_dir = task_state_dir()  # removed once its sandbox is gone
        remove_state = functools.partial(shutil.rmtree, state_dir, True)
        try:
            with trace.phase("time_sandbox_start"):
                request = SandboxRequest(image, run_id=unit.run_id, task_id=unit.key, phase="agent")
                # An agent may need more of its sandbox (its bundle, the gateway): building a bundle takes a while.
                request = await in_thread(agent.sandbox_request, request, model=unit.endpoint, state_dir=state_dir)
                sandbox = await provider.start(request)
            trace.log_lines += provider.limit_notes()  # the limits in force, and how each is kept
        except BaseException:
            remove_state()
            raise
        with stopped_on_failure(sandbox, remove_state):
            key = _image_key(sandbox, unit.workdir, unit.instance.base_commit)
            run, patch = await work(unit, agent, harness, sandbox, trace, state_dir, tools.seals, key)
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
