"""An agent's timeout is the runner's to say (issue 31, item 6): a timed-out agent's sample is masked
for training, so an agent that could claim one would buy itself a re-roll. What the agent's processes
write (OpenClaw's JSON envelope on its stdout: any process it starts can write there) is never a
timeout by itself; only the runner's own clock is."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from anyswe.agents.base import AgentContext, ExitReason
from anyswe.agents.openclaw import OpenClawAgent, OpenClawConfig
from anyswe.datasets import load_dataset
from anyswe.sandbox.request import ExecResult

#: The agent's time, as the executor gives it; OpenClaw is told 15 s less (its --timeout).
AGENT_TIMEOUT = 600.0
CLAIM = json.dumps({"status": "timeout", "error": "Request timed out", "assistantTurns": 1})


def _context() -> AgentContext:
    task = load_dataset("demo").by_id()["demo__calc-1"].agent_view()
    sandbox: Any = None  # outcome() reads only the exec's result and the task's state directory
    return AgentContext(sandbox=sandbox, task=task, workdir="/testbed", timeout=AGENT_TIMEOUT)


def _outcome(stdout: str, duration: float, tmp_path: Path) -> tuple[ExitReason | None, list[str]]:
    ctx = _context()
    outcome = OpenClawAgent(OpenClawConfig()).outcome(ctx, ExecResult(0, stdout, "", duration), tmp_path)
    return outcome.exit_reason, ctx.log_lines


def test_the_deadline_openclaw_is_given_is_the_one_its_claim_is_checked_against() -> None:
    argv = OpenClawAgent(OpenClawConfig()).command(_context())
    assert argv[argv.index("--timeout") + 1] == str(int(AGENT_TIMEOUT - 15))


@pytest.mark.parametrize("printed", [CLAIM, "tool output\n" + CLAIM])
def test_a_timeout_claimed_before_the_deadline_is_an_error_not_a_timeout(tmp_path: Path, printed: str) -> None:
    # Three seconds in, with 585 to go: whatever printed it, the runner's clock says it did not time out.
    reason, log = _outcome(printed, 3.0, tmp_path)
    assert reason == ExitReason.ERROR
    assert any("said it timed out after 3s, before its deadline: not a timeout" in line for line in log), log


def test_openclaw_stopping_itself_at_its_deadline_is_a_timeout(tmp_path: Path) -> None:
    # OpenClaw's own stop, 5 s before the runner would kill it: the exec's duration shows its time was up.
    reason, _ = _outcome(CLAIM, AGENT_TIMEOUT - 15 + 0.4, tmp_path)
    assert reason == ExitReason.TIMEOUT


def test_an_agent_that_claims_a_timeout_is_not_masked(tmp_path: Path) -> None:
    """Through the executor's agent phase and the decision: the sample counts, unmasked."""
    import asyncio

    from anyswe.execute.decide import Facts, decide
    from anyswe.execute.task import run_agent

    class Claims(OpenClawAgent):
        async def run(self, ctx: AgentContext) -> Any:  # the exec as CliAgent.run makes it, 3 s in
            return self.outcome(ctx, ExecResult(0, CLAIM, "", 3.0), tmp_path)

    ran = asyncio.run(run_agent(Claims(OpenClawConfig()), _context(), AGENT_TIMEOUT))
    assert (ran.timed_out, ran.outcome.exit_reason) == (False, ExitReason.ERROR)
    decision = decide(Facts(verdict_resolved=True, agent_timed_out=ran.timed_out, exit_reason=ran.outcome.exit_reason))
    assert (decision.mask_sample, decision.resolved) == (False, True)
