"""The one owner of an attempt's facts: an :class:`Outcome` that stages append to, and the row written from it.

The task's phases make it (execute/task.py ``classify``): what ran (identity, provenance, the patch,
the caps, the timings, ``record``), what the tests said (``tests_resolved``, never overwritten), how
the agent ended (``exit``), what its model calls cost (``usage``), and the failures found. Every
later stage adds what it learnt and changes nothing it did not own: the grant settles the usage
once (and may end the exit: a cap the gateway keeps), and the grant, the relay, a dead Ray node, the
reading of the trajectory and the recorder each *append* a :class:`Failure` with its source.
:meth:`Outcome.row` writes the results row from it, validated, with the verdict, reward and mask
:func:`~anyswe.execute.decide.decide` gives for its facts: the same facts give the same row, whichever
stage was last.

Which failure decides the row: the last untrusted one (infra, grading, internal: a later stage that
finds the attempt void overrules an earlier finding), else the agent's (their messages joined). A
stage appends only what its own check found; the guards (a relay failure counts only for a row not
already failed otherwise, say) stay where the knowledge is.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from anyswe.agents.base import AgentUsage, ExitReason
from anyswe.execute.decide import UNTRUSTED, Facts, decide, tampered
from anyswe.execute.record import Record
from anyswe.results.schema import ExitBy, Failure, TaskResult

__all__ = ["Exit", "Failure", "Outcome", "Record", "Usage"]


@dataclass(frozen=True)
class Exit:
    """How the agent's run ended: its reason, whether the deadline ended it, and who ended it."""

    reason: ExitReason | None = None
    timed_out: bool = False
    by: ExitBy | None = None
    #: Why, when a cap ended it (the turn cap, the budget): the row's `error` when nothing failed.
    detail: str | None = None


@dataclass
class Usage(AgentUsage):
    """What the attempt's model calls cost (the agent's own report until the grant, which counted every call,
    settles it) and how they were made."""

    model_params: str | None = None
    token_prefix_chain: bool | None = None
    mask_off_policy: bool = False
    trajectory_path: str | None = None


_USAGE_FIELDS = tuple(f.name for f in dataclasses.fields(Usage))


@dataclass(frozen=True)
class Outcome:
    #: What the task's phases established once: identity, provenance, patch, caps, timings.
    record: Record
    #: What the tests said (False when they never ran).
    tests_resolved: bool
    exit: Exit = field(default_factory=Exit)
    usage: Usage = field(default_factory=Usage)
    failures: tuple[Failure, ...] = ()
    #: Whether the grant has settled the usage (it does so once).
    settled_usage: bool = False

    def failed(self, failure: Failure) -> Outcome:
        """This outcome with ``failure`` appended."""
        return dataclasses.replace(self, failures=(*self.failures, failure))

    def settled(self, usage: dict[str, Any], exit: Exit | None = None) -> Outcome:
        """The grant's count of the model calls in place of the agent's own report (and the exit, when a cap
        the gateway keeps ended the run); once per attempt."""
        if self.settled_usage:
            raise ValueError("an attempt's usage is settled once, by its grant")
        return dataclasses.replace(
            self, usage=dataclasses.replace(self.usage, **usage), exit=exit or self.exit, settled_usage=True
        )

    @property
    def deciding(self) -> tuple[Failure | None, str | None]:
        """The failure that decides the row, and the row's error text."""
        untrusted = [f for f in self.failures if f.kind in UNTRUSTED]
        if untrusted:
            return untrusted[-1], untrusted[-1].message
        agent = [f for f in self.failures if f.kind == "agent"]
        if agent:
            return agent[0], "; ".join(f.message for f in agent)
        return None, self.exit.detail

    def facts(self) -> Facts:
        failure, _ = self.deciding
        return Facts(
            verdict_resolved=self.tests_resolved,
            error_kind=failure.kind if failure else None,
            agent_timed_out=self.exit.timed_out,
            exit_reason=self.exit.reason,
            off_policy=self.usage.mask_off_policy and self.usage.token_prefix_chain is False,
            tampered=tampered(self.record.patch.flags),
            tamper_policy=self.record.patch.tamper_policy,
        )

    def row(self) -> TaskResult:
        """The results row, validated (a wrong field fails here, not when the row is read back), its text
        made valid UTF-8 but for the patch (``TaskResult.with_valid_text``). An attempt the recorder could
        not write keeps no patch: nothing of it is beside the row."""
        failure, error = self.deciding
        fields: dict[str, Any] = {
            **self.record.fields(),
            "tests_resolved": self.tests_resolved,
            "exit_reason": self.exit.reason,
            "agent_timed_out": self.exit.timed_out,
            "exit_by": self.exit.by,
            **dataclasses.asdict(self.usage),
            "error_kind": failure.kind if failure else None,
            "error": error,
            "error_permanent": bool(failure and failure.permanent),
            "failures": list(self.failures),
            **decide(self.facts()).fields(),
        }
        if any(f.source == "recorder" for f in self.failures):
            fields["model_patch"] = ""
        return TaskResult.model_validate(fields).with_valid_text()

    @classmethod
    def of_row(cls, row: TaskResult) -> Outcome:
        """The outcome a row was written from (a row read back, or one from an older schema migrated)."""
        values = row.model_dump()
        exit = Exit(row.exit_reason, row.agent_timed_out, row.exit_by, None if row.error_kind else row.error)
        return cls(
            record=Record.of(values),
            tests_resolved=row.tests_resolved,
            exit=exit,
            usage=Usage(**{k: values[k] for k in _USAGE_FIELDS}),
            failures=tuple(row.failures),
        )
