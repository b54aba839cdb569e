"""One task, start to finish: image -> sandbox -> agent -> patch capture -> fresh sandbox -> grade -> row.

Every phase is timed. Whatever happens, the row says what: an infrastructure failure (runtime,
image, sandbox) is ``error_kind="infra"`` and masks the sample; the agent's own failure is
``"agent"`` and counts as unresolved; a grading failure is ``"grading"`` and masks the sample.
"""

from __future__ import annotations

import asyncio
import json
import time
import traceback
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from anyswe.agents import AgentContext, AgentOutcome, ExitReason
from anyswe.errors import GradingError, InfraError
from anyswe.grading import get_harness
from anyswe.grading.ladder import empty_patch_verdict, grade_patch

if TYPE_CHECKING:
    from anyswe.agents import Agent
    from anyswe.datasets import Instance
    from anyswe.grading import Harness, Verdict
    from anyswe.images.resolve import ImageResolver
    from anyswe.plan import Plan, Task
    from anyswe.results.store import RunStore
    from anyswe.sandbox import Sandbox, SandboxProvider

#: Exit reasons under which a resolved sample is masked: the agent did not choose to stop.
_FORCED_STOPS = {ExitReason.MAX_ITERATIONS, ExitReason.CONTEXT_WINDOW}


@dataclass
class TaskEnv:
    """What every task of a run shares."""

    plan: Plan
    store: RunStore
    providers: dict[str, SandboxProvider]
    agents: dict[str, Agent]
    images: ImageResolver
    run_id: str
    attempts: dict[str, int] = field(default_factory=dict)
    _harnesses: dict[str, Harness] = field(default_factory=dict)

    def harness(self, instance: Instance) -> Harness:
        """The spec's harness, or (``auto``) the one this instance routes to."""
        name = self.plan.harness_name
        if name == "auto":
            name = self.plan.dataset.harness_for(instance)
        if name not in self._harnesses:
            self._harnesses[name] = get_harness(name)
        return self._harnesses[name]


async def capture_patch(sandbox: Sandbox, workdir: str, base_commit: str) -> str:
    """Everything the agent changed, new files included, as a binary git diff against the base commit.

    Against ``base_commit`` rather than HEAD, so an agent that commits its work is still captured.
    """
    r = await sandbox.exec(
        ["bash", "-c", f"git add -A && git diff --cached --binary {base_commit}"], workdir=workdir, timeout=300
    )
    if r.exit_code != 0:
        raise InfraError(f"patch capture failed (exit {r.exit_code}): {r.stderr.strip()[-500:]}")
    return r.stdout


def mask_sample(*, error_kind: str | None, agent_timed_out: bool, resolved: bool, exit_reason: ExitReason) -> bool:
    """Whether a sample is left out of training and rates: it says nothing about the agent's skill.

    Masked: an infrastructure, grading or internal error; an agent timeout; and a resolve reached
    although the agent was stopped (max iterations, context window), which is luck, not a solution.
    """
    return bool(
        error_kind in ("infra", "grading", "internal") or agent_timed_out or (resolved and exit_reason in _FORCED_STOPS)
    )


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


async def run_task(env: TaskEnv, task: Task) -> dict[str, Any]:
    """Run ``task`` and return its results row (also writing its artefacts)."""
    spec = env.plan.spec
    instance = env.plan.instance(task.instance_id)
    provider = env.providers[task.cell.provider]
    agent = env.agents[task.cell.agent]
    harness = env.harness(instance)
    out_dir = env.store.task_dir(task.key)
    times: dict[str, float] = {}
    row: dict[str, Any] = {
        **task.row(),
        "spec": spec.name,
        "run_id": env.run_id,
        "provider_type": spec.providers[task.cell.provider].type,
        "repo": instance.repo,
        "attempt": env.attempts.get(task.key, 0) + 1,
        "harness": harness.name,
        "started_at": _now(),
        "resolved": False,
        "reward": 0.0,
        "patch_exists": False,
        "patch_applied": False,
        "applied_by": None,
        "agent_timed_out": False,
        "tests_timed_out": False,
        "exit_reason": None,
        "error_kind": None,
        "error": None,
        "model_patch": "",
    }
    t_total = time.monotonic()
    ctx: AgentContext | None = None
    outcome = AgentOutcome(exit_reason=ExitReason.ERROR)
    verdict: Verdict | None = None
    try:
        t = time.monotonic()
        image = await env.images.image_for(instance, task.cell.provider)
        times["time_image"] = time.monotonic() - t
        row["image"] = image

        t = time.monotonic()
        async with provider.sandbox(image, run_id=env.run_id, task_id=task.key) as sandbox:
            times["time_sandbox_start"] = time.monotonic() - t
            ctx = AgentContext(
                sandbox=sandbox,
                task=instance.agent_view(),
                workdir=harness.workdir,
                timeout=spec.timeouts.agent,
                reference_patch=instance.patch if agent.needs_reference else None,
            )
            t = time.monotonic()
            try:
                outcome = await asyncio.wait_for(agent.run(ctx), spec.timeouts.agent)
            except TimeoutError:
                row["agent_timed_out"] = True
                outcome = AgentOutcome(exit_reason=ExitReason.TIMEOUT)
            except InfraError:
                raise
            except Exception as exc:  # the agent's own failure: recorded, and its work still graded
                row["error_kind"], row["error"] = "agent", f"{type(exc).__name__}: {exc}"
                ctx.log(traceback.format_exc())
                outcome = AgentOutcome(exit_reason=ExitReason.ERROR)
            times["time_agent"] = time.monotonic() - t

            t = time.monotonic()
            patch = outcome.submitted_patch
            if patch is None:
                patch = await capture_patch(sandbox, harness.workdir, instance.base_commit)
            times["time_patch_capture"] = time.monotonic() - t
        row["model_patch"] = patch
        row["exit_reason"] = str(outcome.exit_reason)

        t = time.monotonic()
        if patch.strip():
            # A fresh sandbox: nothing the agent did outside its patch can reach the tests.
            async with provider.sandbox(image, run_id=env.run_id, task_id=task.key) as grader:
                verdict = await grade_patch(grader, instance, harness, patch, timeout=spec.timeouts.grading)
        else:
            verdict = empty_patch_verdict(instance, harness)
        times["time_grading"] = time.monotonic() - t
        row.update(
            resolved=verdict.resolved,
            reward=1.0 if verdict.resolved else 0.0,
            patch_exists=verdict.patch_exists,
            patch_applied=verdict.patch_applied,
            applied_by=verdict.applied_by,
            tests_timed_out=verdict.tests_timed_out,
        )
    except InfraError as exc:
        row["error_kind"], row["error"] = "infra", f"{type(exc).__name__}: {exc}"
    except GradingError as exc:
        row["error_kind"], row["error"] = "grading", f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # a bug in anyswe must not stop the other tasks; the task runs again next time
        row["error_kind"], row["error"] = "internal", traceback.format_exc()
        del exc
    times["time_total"] = time.monotonic() - t_total
    row.update({k: round(v, 3) for k, v in times.items()})
    row.update({f"agent_{k}": v for k, v in outcome.metrics.items()})
    row["mask_sample"] = mask_sample(
        error_kind=row["error_kind"],
        agent_timed_out=row["agent_timed_out"],
        resolved=row["resolved"],
        exit_reason=outcome.exit_reason,
    )
    row["finished_at"] = _now()
    _write_artifacts(out_dir, row, ctx, verdict, instance.instance_id)
    return row


def _write_artifacts(
    out_dir: Any, row: dict[str, Any], ctx: AgentContext | None, verdict: Verdict | None, iid: str
) -> None:
    (out_dir / "patch.diff").write_text(row.get("model_patch") or "")
    (out_dir / "agent.log").write_text("\n".join(ctx.log_lines) + "\n" if ctx else "")
    if verdict is not None:
        (out_dir / "eval.sh").write_text(verdict.eval_script)
        (out_dir / "test_output.txt").write_text(verdict.test_output)
        (out_dir / "apply.log").write_text(verdict.apply_log)
        (out_dir / "report.json").write_text(json.dumps(verdict.report(iid), indent=2) + "\n")
    if row.get("error"):
        (out_dir / "error.txt").write_text(str(row["error"]) + "\n")
