"""The one owner of a sample's verdict, reward and mask: a pure function of the phases' facts.

Every place that learns something about a task (the task's own phases, the model gateway's grant,
the relay on a remote node, the driver recording the row) appends that fact to the attempt's
:class:`~anyswe.execute.outcome.Outcome`, whose row asks :func:`decide`; none sets ``resolved``,
``reward`` or ``mask_sample`` itself. A trainer can then
trust that a reward and a mask mean one thing, whichever executor ran the task.

The table (``tests/unit/test_decide.py`` checks it row by row):

=====================================================  ==========  ======  =====  ================
facts                                                  resolved    reward  mask   mask_reason
=====================================================  ==========  ======  =====  ================
error_kind ``infra`` (runtime, image, sandbox, model     False       0.0     yes    ``infra``
upstream, relay, a lost row's record)
error_kind ``grading`` (the harness failed)              False       0.0     yes    ``grading``
error_kind ``internal`` (a bug in anyswe)                False       0.0     yes    ``internal``
flagged ``runner_tamper`` / ``status_conflict``, policy    verdict     =       yes    ``tampered``
``mask``
flagged so, policy ``zero`` (the default)                verdict     0.0     (as    (as below)
                                                                             below)
agent timed out (host's deadline, or its own)            verdict     =       yes    ``agent_timeout``
token ids off the prefix chain, ``mask_off_policy`` on   verdict     =       yes    ``off_policy``
verdict resolved, exit max_iterations / context_window   True        1.0     yes    ``forced_stop``
/ budget (Gym's accidental-pass mask: luck, not a fix)
error_kind ``agent`` (its own crash, a capture the       verdict     =       no     --
agent broke, a patch over the cap)
anything else                                            verdict     =       no     --
=====================================================  ==========  ======  =====  ================

A flagged sample (grading/testrecord: the log and pytest's own record of the run disagree, or a test's
last status in the log overrides a failure) keeps the harness's verdict, as the official harness
grades it; what it earns is the spec's ``grading.tampered``: ``zero`` (the default: the policy is
not paid for a log it may have written), ``mask`` (left out of training) or ``count`` (as its
verdict says).

A group (one instance's samples, as GRPO trains on them) can be masked together: :func:`mask_group`
masks every rollout of a group one of whose rollouts is masked (reason ``group``), as SkyRL's Harbor
generator does, so that a group's advantage is never taken over its survivors only.

An unresolved sample after a forced stop is not masked: running out of steps is the agent's doing
and a true negative for training. Nor are tests that run out of time (NeMo Gym 0.7.0 masks its
``eval_timeout``): in a live grading sandbox the patch is what made them run that long, and a mask
would give it another roll; a grading sandbox that died is infra, as above. The infra, grading and
internal kinds come first: a row whose verdict cannot be trusted is never resolved, whatever the
tests printed.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from anyswe.agents.base import ExitReason
from anyswe.grading.testrecord import RUNNER_TAMPER, STATUS_CONFLICT

if TYPE_CHECKING:
    from anyswe.results.schema import ErrorKind, TamperPolicy, TaskResult

#: Exit reasons that mean the agent was stopped rather than chose to stop.
FORCED_STOPS: frozenset[str] = frozenset({ExitReason.MAX_ITERATIONS, ExitReason.CONTEXT_WINDOW, ExitReason.BUDGET})
#: Error kinds after which nothing the tests said is a verdict.
UNTRUSTED: frozenset[str] = frozenset({"infra", "grading", "internal"})


class MaskReason(StrEnum):
    """Why a sample is left out of training and the RL rate. The resolve rate (results/tables.py)
    leaves out only the untrusted kinds: an agent timeout or a forced stop is the agent's doing and
    counts there as its tests said, as in the official harness's report."""

    INFRA = "infra"
    GRADING = "grading"
    INTERNAL = "internal"
    AGENT_TIMEOUT = "agent_timeout"
    OFF_POLICY = "off_policy"
    FORCED_STOP = "forced_stop"
    #: Another rollout of the same group (an instance's samples) is masked (mask_group).
    GROUP = "group"
    #: Flagged runner_tamper or status_conflict, under the spec's ``grading.tampered: mask``.
    TAMPERED = "tampered"


@dataclass(frozen=True)
class Facts:
    """What the phases established about one attempt, and nothing derived from it."""

    #: What the tests said (False when there was no verdict).
    verdict_resolved: bool
    error_kind: ErrorKind | None = None
    agent_timed_out: bool = False
    exit_reason: str | None = None
    #: The calls' token ids broke the prefix chain and the model's ``mask_off_policy`` is on.
    off_policy: bool = False
    #: Flagged runner_tamper or status_conflict (grading/testrecord), and what such a sample earns.
    tampered: bool = False
    tamper_policy: TamperPolicy = "zero"


@dataclass(frozen=True)
class Decision:
    resolved: bool
    reward: float
    mask_sample: bool
    mask_reason: MaskReason | None

    def fields(self) -> dict[str, Any]:
        """The decision as result-row fields."""
        reason = None if self.mask_reason is None else self.mask_reason.value
        return {
            "resolved": self.resolved,
            "reward": self.reward,
            "mask_sample": self.mask_sample,
            "mask_reason": reason,
        }


def decide(facts: Facts) -> Decision:
    """The verdict, reward and mask of one attempt (the table in this module's docstring)."""
    if facts.error_kind in UNTRUSTED:
        return Decision(False, 0.0, True, MaskReason(facts.error_kind))
    resolved = facts.verdict_resolved
    reward = 1.0 if resolved else 0.0
    if facts.tampered and facts.tamper_policy == "mask":
        return Decision(resolved, reward, True, MaskReason.TAMPERED)
    if facts.tampered and facts.tamper_policy == "zero":
        reward = 0.0
    if facts.agent_timed_out:
        return Decision(resolved, reward, True, MaskReason.AGENT_TIMEOUT)
    if facts.off_policy:
        return Decision(resolved, reward, True, MaskReason.OFF_POLICY)
    if resolved and facts.exit_reason in FORCED_STOPS:
        return Decision(resolved, reward, True, MaskReason.FORCED_STOP)
    return Decision(resolved, reward, False, None)


def facts_of(result: TaskResult) -> Facts:
    """The facts a row holds: the tests' own verdict (``tests_resolved``, never the decided one), its error
    kind, its exit and its calls' prefix chain."""
    return Facts(
        verdict_resolved=result.tests_resolved,
        error_kind=result.error_kind,
        agent_timed_out=result.agent_timed_out,
        exit_reason=result.exit_reason,
        off_policy=result.mask_off_policy and result.token_prefix_chain is False,
        tampered=tampered(result.flags),
        tamper_policy=result.tamper_policy,
    )


#: The flags that make a sample tampered (grading/testrecord's), for the reward policy.
TAMPER_FLAGS = frozenset({RUNNER_TAMPER, STATUS_CONFLICT})


def tampered(flags: list[str] | None) -> bool:
    return bool(TAMPER_FLAGS & set(flags or ()))


def mask_group(results: list[TaskResult]) -> list[TaskResult]:
    """The group's results with every one masked if any is (the others' reason: ``group``); a group
    none of whose rollouts is masked comes back as it is."""
    if not any(r.mask_sample for r in results):
        return list(results)
    return [
        r if r.mask_sample else r.model_copy(update={"mask_sample": True, "mask_reason": MaskReason.GROUP.value})
        for r in results
    ]
