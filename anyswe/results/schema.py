"""The contract of ``results.jsonl``: one :class:`TaskResult` per finished task attempt.

Every writer builds a TaskResult and every reader validates one, so a row's fields are spelled
once, here; the polars schema of the task tables is derived from the same model. Rows written
before the model existed (schema 1: no ``schema_version``) are migrated on read; a row from a
newer anyswe, or one that does not validate, is an error naming the file, line and field.

A run directory is read as untrusted (a report may be made of one from elsewhere): a row is
validated strictly (``"resolved": "yes"`` or ``1`` is an error, never true), and its key must be a
task key (:func:`key_problem`: it names ``tasks/<key>``, so ``../..`` is refused before any file is read).
"""

from __future__ import annotations

import re
import types
from enum import Enum
from typing import TYPE_CHECKING, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_core import PydanticSerializationError

from anyswe._files import name_problem
from anyswe.agents.base import ExitReason
from anyswe.errors import ResultsError

if TYPE_CHECKING:
    import polars as pl

SCHEMA_VERSION = 11

ErrorKind = Literal["infra", "agent", "grading", "internal"]
#: Who stated a failure: the task's own phases, the model grant (gateway), the relay on a remote node,
#: the executor when a node died, the reading of the trajectory back, the driver recording the row.
FailureSource = Literal["task", "grant", "relay", "node", "trajectory", "recorder"]
#: Who ended the agent's run: itself (its own exit), the host (its deadline), the gateway (a cap it keeps).
ExitBy = Literal["agent", "host", "gateway"]
#: What a sample flagged runner_tamper or status_conflict earns (a spec's grading.tampered: execute/decide.py).
TamperPolicy = Literal["count", "mask", "zero"]
#: Error kinds after which a task runs again on the next apply: the task itself never failed.
RETRYABLE: frozenset[str] = frozenset({"infra", "internal"})

#: Phase timings in seconds, in pipeline order. The phases partition ``time_total`` (schema 8 on):
#: each runs from the end of the one before, so a step between two is in the later one.
PHASE_FIELDS = (
    "time_image",
    "time_sandbox_start",
    "time_seal",
    "time_agent",
    "time_settle",
    "time_patch_capture",
    "time_grading",
)
TIME_FIELDS = (*PHASE_FIELDS, "time_total")


class Failure(BaseModel):
    """One failure of an attempt, as the stage that found it stated it (execute/outcome.py appends them)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: ErrorKind
    #: None: a row from before failures had sources (schema 8 and older), migrated from its error.
    source: FailureSource | None
    message: str
    permanent: bool = False


class TaskResult(BaseModel):
    """One finished attempt of one task: identity, verdict, agent report, error, timings."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[11] = 11
    # -- identity: which task, which attempt --------------------------------------------------------
    key: str
    cell: str
    agent: str
    model: str | None = None
    provider: str
    provider_type: str = ""
    instance_id: str
    repo: str = ""
    sample: int = 0
    attempt: int = 1
    spec: str = ""
    run_id: str = ""
    harness: str = ""
    image: str | None = Field(
        default=None, description="What the provider ran: an image reference, or its own artefact's path (a SIF)."
    )
    # -- provenance: what exactly ran and graded ----------------------------------------------------
    image_digest: str | None = Field(
        default=None, description="The artefact that ran: the image id, or the artefact file's sha256."
    )
    image_source_digest: str | None = Field(
        default=None,
        description="The stored image (config digest = image id) the artefact came from; equal across backends "
        "that ran the same image.",
    )
    swebench_version: str | None = None
    eval_script_sha256: str | None = Field(default=None, description="sha256 of the eval script the tests ran.")
    image_changes: list[str] | None = Field(
        default=None,
        description="Paths the image's own work tree changes from its HEAD (its build regenerated or left them; "
        "at most 201 listed): the baseline the patch is captured against, never part of it. [] none; None unknown.",
    )
    started_at: str = ""
    finished_at: str = ""
    # -- verdict ------------------------------------------------------------------------------------
    tests_resolved: bool = Field(
        default=False,
        description="What the tests said, whatever else happened (never overwritten); `resolved` is decide()'s, "
        "which an untrusted failure makes False.",
    )
    resolved: bool = False
    reward: float = 0.0
    patch_exists: bool = False
    patch_applied: bool = False
    applied_by: str | None = None
    tests_timed_out: bool = False
    model_patch: str = Field(default="", description="The patch graded; empty when it was over max_patch_bytes.")
    # -- the caps in force (issue 21), and the one hit: what a task may cost the host ----------------
    patch_bytes: int | None = Field(default=None, description="Size of the agent's patch (UTF-8 bytes).")
    max_patch_bytes: int | None = Field(
        default=None, description="The patch cap: a bigger patch is the agent's failure, not graded, not kept."
    )
    max_output_bytes: int | None = Field(
        default=None, description="Bytes kept of each stream of one command (head and tail past it)."
    )
    limit_hit: str | None = Field(
        default=None,
        description="The cap that decided this row: max_patch_bytes, or eval_output_bytes (the eval log "
        "over its cap: not graded, unresolved).",
    )
    flags: list[str] | None = Field(
        default=None,
        description="Reward-hacking flags of the patch (grading/flags.py: conftest, test_config, test_files, "
        "skip_markers; and, in non-test Python source, runner_internals: it names the test runner's internals "
        "(_pytest, pluggy, pytest's report classes, unittest's result); pytest_hooks: it defines a pytest_* hook or "
        "registers a plugin; import_hijack: it writes sys.modules or builtins, installs an import hook, or adds a "
        "file that runs at interpreter start or shadows the runner); and of the test run (grading/testrecord): "
        "runner_tamper: the log and pytest's own record of the run disagree on a FAIL_TO_PASS or PASS_TO_PASS test, "
        "or the runner's report machinery changed while the tests ran; status_conflict: such a test has a failing "
        "and then a passing status in one log. They never change the verdict. None: a row from before flags were "
        "recorded.",
    )
    test_record: str | None = Field(
        default=None,
        description="pytest's record of the test run against its log (grading/testrecord): compared, none (no "
        "record made: the tests do not run under pytest, or pytest is the code under test), missing (a record "
        "was due and is not there: runner_tamper when the log says a test passed), unloadable (pytest could not "
        "import the record's plugin: the tests ran again without it). None: not graded, or a row from before.",
    )
    tamper: list[str] | None = Field(
        default=None,
        description="What runner_tamper and status_conflict were raised for: each test with its status in the log "
        "and in pytest's record (or its statuses in the log), and the runner's changes the record saw.",
    )
    tamper_policy: TamperPolicy = Field(
        default="zero",
        description="What a sample flagged runner_tamper or status_conflict earns (the spec's grading.tampered): "
        "count (its verdict's reward), mask (masked, reason tampered) or zero (reward 0, not masked). The "
        "verdict (resolved) is the harness's in every case.",
    )
    # -- what the agent reported ----------------------------------------------------------------------
    exit_reason: ExitReason | None = None
    exit_by: ExitBy | None = Field(default=None, description="Who ended the agent's run; None: it never ran.")
    agent_timed_out: bool = False
    model_calls: int = 0
    turns: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float | None = None
    #: The sampling parameters the gateway applied to every call (JSON), from the spec's model params.
    model_params: str | None = None
    trajectory_path: str | None = None
    # -- errors and masking ---------------------------------------------------------------------------
    error_kind: ErrorKind | None = Field(default=None, description="The kind of the failure that decides the row.")
    error: str | None = None
    failures: list[Failure] = Field(
        default_factory=list, description="Every failure of the attempt, in the order stated, with its source."
    )
    error_permanent: bool = Field(
        default=False,
        description="An infra error no attempt can change (a missing image, an image that is not the instance's): "
        "reported at once instead of retried. False for a transient one (retried) and for rows without an error.",
    )
    mask_sample: bool = False
    token_prefix_chain: bool | None = Field(
        default=None,
        description="Whether the calls' token ids (from a policy server that returns them) form one growing "
        "prefix chain; None: no token ids were returned.",
    )
    mask_off_policy: bool = Field(default=False, description="The model's mask_off_policy setting in force.")
    mask_reason: str | None = Field(
        default=None,
        description="Why the sample is masked (execute/decide.py: infra, grading, internal, agent_timeout, "
        "off_policy, forced_stop); None when it is not.",
    )
    # -- timings (seconds; each phase from the end of the one before, None if it never began) ---------
    time_image: float | None = Field(default=None, description="Image made runnable, and its digests.")
    time_sandbox_start: float | None = Field(
        default=None, description="The agent's sandbox request (its bundle) and the sandbox started."
    )
    time_seal: float | None = Field(default=None, description="The repository's starting point checked.")
    time_agent: float | None = None
    time_settle: float | None = Field(
        default=None, description="After the agent: the sandbox checked alive, the processes it left ended."
    )
    time_patch_capture: float | None = Field(
        default=None, description="The patch captured (or taken as submitted) and capped."
    )
    time_grading: float | None = Field(
        default=None, description="The agent's sandbox handed to teardown; a fresh one started, graded, handed back."
    )
    time_total: float | None = Field(default=None, description="The sum of the phases: the task's wall time.")

    @property
    def retryable(self) -> bool:
        """Whether the next apply runs this task again (an infrastructure or internal error)."""
        return self.error_kind in RETRYABLE

    def to_json_line(self) -> bytes:
        """The row as results.jsonl holds it: :meth:`with_valid_text`'s, in UTF-8."""
        try:
            return self.model_dump_json().encode() + b"\n"
        except PydanticSerializationError:
            return self.with_valid_text().model_dump_json().encode() + b"\n"

    def with_valid_text(self) -> TaskResult:
        """This row, but for a surrogate code point in its text (JSON an agent or a model wrote can hold
        one; UTF-8, polars and parquet cannot) made U+FFFD; itself when there is none. The patch is
        left as it is: it is what was graded, and a changed one would not be (such a row cannot be
        written, and the recorder makes it an error of its own)."""
        from anyswe._text import valid_text

        try:
            self.model_dump_json()
        except PydanticSerializationError:
            fields = self.model_dump(mode="json")
            patch = fields.pop("model_patch")
            return TaskResult.model_validate(valid_text(fields) | {"model_patch": patch})
        return self


def _migrate_v1(row: dict[str, Any]) -> dict[str, Any]:
    """Schema 1 (untyped dicts): the same names, plus free-form ``agent_<metric>`` numbers, now typed fields."""
    return _migrate_v2({k: v for k, v in row.items() if not k.startswith("agent_") or k == "agent_timed_out"})


def _migrate_v2(row: dict[str, Any]) -> dict[str, Any]:
    """Schema 2: no provenance fields yet (they stay unknown); schema 3: every infra error was transient;
    schema 4: no caps recorded (there were none: their fields stay None); schema 5: no flags (None);
    schema 6: no mask reason (what decide() gives for the row's facts, for a masked row); schema 7: no seal
    or settle phase (None), and its phases did not add up to its total (steps between them were in none);
    schema 8: no tests' verdict apart from the decided one (the row's `resolved` is the best known: a row an
    untrusted failure marked unresolved stays so), no failure list (its one error, source unknown), no
    exit_by (None); schema 9: no record of the tests (test_record and tamper None; its policy the default,
    moot without a flag); schema 10: no image changes recorded (None)."""
    out = {**row, "schema_version": SCHEMA_VERSION}
    if isinstance(row.get("resolved", False), bool):  # else the row's own field is the error to report
        out.setdefault("tests_resolved", row.get("resolved", False))
    if "failures" not in out:
        kind = row.get("error_kind")
        failure = {"kind": kind, "source": None, "message": row.get("error") or "", "permanent": False}
        out["failures"] = [failure | {"permanent": row.get("error_permanent", False)}] if kind else []
    return out


#: A task key (plan.task_key): 16 hex digits of what can change the result, ``__``, the instance id.
_KEY = re.compile(r"[0-9a-f]{16}__(.*)", re.DOTALL)


def key_problem(key: str, instance_id: str) -> str | None:
    """Why ``key`` is not the task key of a row of ``instance_id`` (None when it is)."""
    shape = _KEY.fullmatch(key)
    if shape is None:
        return "is not a task key (16 hex digits, '__', the instance id)"
    problem = name_problem(shape.group(1))
    if problem is not None:
        return f"is not a task key: its instance id {problem}"
    if shape.group(1) != instance_id:
        return f"is not a task key of the row's instance {instance_id[:80]!r}"
    return None


def _enums(row: dict[str, Any]) -> dict[str, Any]:
    """The row with its enum field as the enum (strict validation takes no string for it); a value that is
    not one stays, and fails validation."""
    value = row.get("exit_reason")
    if isinstance(value, str) and value in {e.value for e in ExitReason}:
        return {**row, "exit_reason": ExitReason(value)}
    return row


def parse_row(row: Any, where: str) -> TaskResult:
    """Validate (and migrate) one decoded results line; ``where`` is ``file:line`` for errors."""
    if not isinstance(row, dict):
        raise ResultsError(f"{where}: a results row must be a JSON object")
    version = row.get("schema_version", 1)
    if version == 1:
        row = _migrate_v1(row)
    elif version in (2, 3, 4, 5, 6, 7, 8, 9, 10):
        row = _migrate_v2(row)
    elif version != SCHEMA_VERSION:
        raise ResultsError(
            f"{where}: results schema_version {version!r} is not one this anyswe reads "
            f"(1 to {SCHEMA_VERSION}); it was written by another anyswe version"
        )
    try:
        # Strict: JSON's own types only (a string or a number is no boolean, a string no number).
        result = TaskResult.model_validate(_enums(row), strict=True)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(x) for x in first["loc"]) or "(row)"
        raise ResultsError(f"{where}: field {field!r}: {first['msg']}") from None
    problem = key_problem(result.key, result.instance_id)
    if problem is not None:
        raise ResultsError(f"{where}: field 'key': {result.key[:80]!r} {problem}")
    if version != SCHEMA_VERSION and result.mask_sample and result.mask_reason is None:
        from anyswe.execute.decide import decide, facts_of

        reason = decide(facts_of(result)).mask_reason
        result = result.model_copy(update={"mask_reason": None if reason is None else reason.value})
    return result


def _polars_type(annotation: Any) -> Any:
    import polars as pl

    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        (inner,) = [a for a in get_args(annotation) if a is not type(None)]
        return _polars_type(inner)
    if origin is Literal:
        return _polars_type(type(get_args(annotation)[0]))
    if origin is list:
        return pl.List(_polars_type(get_args(annotation)[0]))
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return pl.Utf8
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return pl.Struct({name: _polars_type(f.annotation) for name, f in annotation.model_fields.items()})
    return {bool: pl.Boolean, int: pl.Int64, float: pl.Float64, str: pl.Utf8}[annotation]


def polars_schema() -> dict[str, pl.DataType]:
    """Column name -> polars dtype, from :class:`TaskResult`'s fields (polars never guesses)."""
    return {name: _polars_type(f.annotation) for name, f in TaskResult.model_fields.items()}


def results_frame(results: list[TaskResult]) -> pl.DataFrame:
    """A polars frame of results with the schema above (an empty list gives an empty frame)."""
    import polars as pl

    return pl.DataFrame([r.model_dump(mode="json") for r in results], schema=polars_schema())
