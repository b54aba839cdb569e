"""What an attempt's phases established once, in typed groups (as inspect_ai's sample record is):
who it is (:class:`Identity`), what exactly ran (:class:`Provenance`), what became of its patch
(:class:`PatchFacts`), the caps in force and the one hit (:class:`Limits`), and when each phase ran
(:class:`Timings`). Each group's field names are the results row's; :class:`Record` flattens them into
a row and reads a row back into them. What the outcome decides (verdict, exit, usage, failures) is not
here: it is the :class:`~anyswe.execute.outcome.Outcome`'s own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from anyswe.results.schema import TamperPolicy


@dataclass(frozen=True)
class Identity:
    """Which attempt at which task of which run."""

    key: str
    cell: str
    agent: str
    provider: str
    instance_id: str
    model: str | None = None
    provider_type: str = ""
    repo: str = ""
    sample: int = 0
    attempt: int = 1
    spec: str = ""
    run_id: str = ""
    harness: str = ""


@dataclass(frozen=True)
class Provenance:
    """What exactly ran and graded: the artefact, its digests, the grader's version, the eval script's hash."""

    image: str | None = None
    image_digest: str | None = None
    image_source_digest: str | None = None
    swebench_version: str | None = None
    eval_script_sha256: str | None = None
    #: What the image's own work tree changes from its HEAD (the seal's finding): the patch's baseline.
    image_changes: list[str] | None = None


@dataclass(frozen=True)
class PatchFacts:
    """The agent's patch and what grading made of it (the tests' verdict itself is the outcome's)."""

    model_patch: str = ""
    patch_exists: bool = False
    patch_applied: bool = False
    applied_by: str | None = None
    tests_timed_out: bool = False
    patch_bytes: int | None = None
    #: Reward-hacking flags (grading/flags.py): facts, never a change of the verdict.
    flags: list[str] | None = None
    #: The tests' record against their log (grading/testrecord): compared, none, missing, unloadable.
    test_record: str | None = None
    #: What the record and the log disagree on, one line each (the test, both statuses), and the
    #: runner's changes it saw.
    tamper: list[str] | None = None
    #: What a sample flagged runner_tamper or status_conflict earns (the spec's grading.tampered).
    tamper_policy: TamperPolicy = "zero"


@dataclass(frozen=True)
class Limits:
    """The caps in force, and the one that decided the task (None: none did)."""

    max_patch_bytes: int | None = None
    max_output_bytes: int | None = None
    limit_hit: str | None = None


@dataclass(frozen=True)
class Timings:
    """When the attempt ran, and the seconds of each phase (they sum to ``time_total``)."""

    started_at: str = ""
    finished_at: str = ""
    time_image: float | None = None
    time_sandbox_start: float | None = None
    time_seal: float | None = None
    time_agent: float | None = None
    time_settle: float | None = None
    time_patch_capture: float | None = None
    time_grading: float | None = None
    time_total: float | None = None


_GROUPS: dict[str, type[Any]] = {
    "identity": Identity,
    "provenance": Provenance,
    "patch": PatchFacts,
    "limits": Limits,
    "timings": Timings,
}
#: Every row field a record holds.
FIELDS = frozenset(f.name for cls in _GROUPS.values() for f in dataclasses.fields(cls))


@dataclass(frozen=True)
class Record:
    identity: Identity
    provenance: Provenance = field(default_factory=Provenance)
    patch: PatchFacts = field(default_factory=PatchFacts)
    limits: Limits = field(default_factory=Limits)
    timings: Timings = field(default_factory=Timings)

    def fields(self) -> dict[str, Any]:
        """The row's fields of every group."""
        out: dict[str, Any] = {}
        for name in _GROUPS:
            out.update(dataclasses.asdict(getattr(self, name)))
        return out

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> Record:
        """The record of a row's fields (the others are not a record's; a missing one takes its default)."""
        groups = {
            name: group(**{f.name: values[f.name] for f in dataclasses.fields(group) if f.name in values})
            for name, group in _GROUPS.items()
        }
        return cls(**groups)
