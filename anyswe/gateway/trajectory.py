"""The trajectory contract: one typed, versioned :class:`Step` per model call of a task.

The gateway is the one writer (:func:`record_line`, a line of ``tasks/<key>/trajectory.jsonl`` per
call, written once the agent has its answer) and :func:`read_trajectory` the one reader, for replay,
the report and rollouts. A step holds, whatever the wire protocol (anthropic-messages, openai-chat,
openai-responses), in one neutral form:

- the messages new since the previous call (all of them on the first, or after the agent rewrote
  its history: ``rewritten``), with ``prior_messages`` saying how many came before;
- the reply: text, reasoning, tool calls and stop reason;
- the tool results the agent then saw, taken by the reader from the next call's new messages;
- usage, cost, latency; token ids and log-probabilities when the upstream returned them;
- the request body as sent but for the conversation (its messages are the step's), for what the
  neutral form leaves out (tools, parameters).

Rows written before the contract (no ``schema_version``) are read too: their messages come from the
request body they kept, through the same wire parser the gateway uses.
"""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from anyswe.errors import ResultsError, first_problem

if TYPE_CHECKING:
    from anyswe.gateway.grants import Grant
    from anyswe.gateway.wire import Conversation, Message, Reply

SCHEMA_VERSION = 1


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


class StepToolCall(_Model):
    id: str = ""
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class StepMessage(_Model):
    """One message: ``role`` is system, user, assistant or tool (a tool result, with ``tool_call_id``)."""

    role: str
    text: str = ""
    tool_calls: list[StepToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None
    #: A tool result the agent's own transcript marks as failed (None: not known).
    is_error: bool | None = None


class StepReply(_Model):
    text: str = ""
    reasoning: str | None = None
    tool_calls: list[StepToolCall] = Field(default_factory=list)
    stop: str = "end"


class StepUsage(_Model):
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


class StepTokens(_Model):
    """The policy's tokens for this call, as a training model server returns them."""

    prompt_token_ids: list[int] | None = None
    generation_token_ids: list[int] | None = None
    generation_log_probs: list[float] | None = None


class Step(_Model):
    """One model call of a task, or a call the gateway refused (``refused``: why; no reply)."""

    schema_version: int = SCHEMA_VERSION
    index: int = 0
    time: float = 0.0
    latency_s: float | None = None
    protocol: str | None = None
    model: str | None = None
    conversation_hash: str | None = None
    prior_messages: int = 0
    rewritten: bool = False
    messages: list[StepMessage] = Field(default_factory=list)
    reply: StepReply | None = None
    tool_results: list[StepMessage] = Field(default_factory=list)
    usage: StepUsage = Field(default_factory=StepUsage)
    cost_usd: float | None = None
    tokens: StepTokens | None = None
    request: Any = None
    refused: Any = None


def _messages(messages: list[Message]) -> list[StepMessage]:
    return [
        StepMessage(
            role=m.role,
            text=m.text,
            tool_calls=[StepToolCall(id=c.id, name=c.name, arguments=c.arguments) for c in m.tool_calls],
            tool_call_id=m.tool_call_id,
        )
        for m in messages
    ]


#: The request fields that hold the conversation: the step has its new messages, so the request kept
#: with it leaves them out (a history sent whole on every call would make the file grow with its square).
CONVERSATION_FIELDS = frozenset({"messages", "input", "system", "instructions"})


@dataclass
class Answered:
    """What the gateway keeps of an answered call until its step is written (after the agent has its
    answer: building and writing the step is off the call's path)."""

    protocol: str
    body: Any
    conv: Conversation
    reply: Reply
    latency: float
    time: float
    #: The call's number among the task's calls read, and the number of the call whose messages it
    #: repeats (its ``conv.reused`` leading ones), if it continues one.
    seq: int
    continues: int | None = None


@dataclass
class Refused:
    """A call the gateway refused (a budget or a cap): never answered."""

    why: Any
    request_bytes: int
    time: float


def record_line(grant: Grant, call: Answered | Refused) -> bytes:
    """The trajectory line of one call (the gateway's; it advances ``grant``'s step count and prefix
    chain). Lines must be made in the order the calls were answered: each continues the last."""
    if isinstance(call, Refused):
        step = Step(index=grant.steps, time=call.time, model=grant.model, refused=call.why)
        grant.steps += 1  # a step of its own: the next answered call's index is not the same
        return (json.dumps(step.model_dump(mode="json") | {"request_bytes": call.request_bytes}) + "\n").encode()
    return step_record(grant, call)


def flush(grant: Grant) -> None:
    """Write the grant's answered calls not yet written, in the order answered, following its prefix chain;
    a failure marks the task, never the call. Called once an answer is out, and when the grant is revoked."""
    calls, grant.unwritten = grant.unwritten, []
    for call in calls:
        if isinstance(call, Answered):
            grant.chain(call.reply.tokens)
    if not calls or grant.trajectory is None:
        return
    try:
        lines = b"".join(record_line(grant, call) for call in calls)
    except (ValueError, TypeError, RecursionError) as exc:  # what the agent sent: its failure, not a free re-roll
        grant.unrecordable = grant.unrecordable or f"a call the agent made cannot be recorded: {str(exc)[:300]}"
        return
    except Exception as exc:  # a step this gateway cannot write is a trajectory it does not have
        grant.unrecorded = grant.unrecorded or f"the gateway could not make a trajectory step: {exc!r}"
        return
    try:
        if grant.trajectory_file is None:
            # Kept open for the task's calls (an open and a close per call cost as much as the write),
            # flushed after each, so the file is whole between calls. A call answered after its task
            # ended (the grant revoked) appends on its own.
            grant.trajectory.parent.mkdir(parents=True, exist_ok=True)
            handle = open(grant.trajectory, "ab")  # noqa: SIM115 - closed when revoked
            if not grant.active:
                with handle:
                    handle.write(lines)
                return
            grant.trajectory_file = handle
        grant.trajectory_file.write(lines)
        grant.trajectory_file.flush()
    except OSError as exc:  # the agent still has its reply; the task is retried as an infra error
        grant.unrecorded = grant.unrecorded or f"the gateway could not record a call in {grant.trajectory}: {exc}"


def step_record(grant: Grant, call: Answered) -> bytes:
    """The trajectory line of one answered call.

    Written as plain JSON in :class:`Step`'s fields (pydantic's validation of a step the gateway
    itself builds cost more than the rest of the record); the reader validates it."""
    from anyswe.gateway._json import dumps

    conv, reply, body = call.conv, call.reply, call.body
    prior, rewritten, digest = _prior(grant, call)
    usage = vars(reply.usage)
    prices = grant.prices
    calls = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in reply.tool_calls]
    step = {
        "schema_version": SCHEMA_VERSION,
        "index": grant.steps,
        "time": call.time,
        "latency_s": round(call.latency, 4),
        "protocol": call.protocol,
        "model": grant.model,
        "conversation_hash": digest,
        "prior_messages": prior,
        "rewritten": rewritten,
        "messages": [_message(m) for m in conv.messages[prior:]],
        "reply": {"text": reply.text, "reasoning": reply.reasoning, "tool_calls": calls, "stop": reply.stop},
        "usage": usage,
        "cost_usd": prices.cost(*usage.values()) if prices is not None else None,
        "tokens": reply.tokens or None,
        "request": {k: v for k, v in body.items() if k not in CONVERSATION_FIELDS} if isinstance(body, dict) else None,
    }
    grant.steps += 1
    grant.last_conversation = (len(conv.messages), digest)
    return dumps(step) + b"\n"


def _message(m: Message) -> dict[str, Any]:
    calls = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in m.tool_calls]
    return {"role": m.role, "text": m.text, "tool_calls": calls, "tool_call_id": m.tool_call_id}


def _prior(grant: Grant, call: Answered) -> tuple[int, bool, str]:
    """How many of the conversation's messages the previous step already had, whether the agent
    rewrote them (compaction, a retry with another history: then every message is new), and the
    conversation's digest. A call that continues the previous step's call (its reading reused that
    call's messages, compared as sent: gateway/wire.py's ``known``) hashes only its new messages;
    any other is hashed in one pass, the previous step's prefix checked on the way."""
    from anyswe.gateway.wire import Digest

    conv = call.conv
    last, kept = grant.last_conversation, grant.last_digest
    count = last[0] if last is not None else 0
    if last is not None and kept is not None and call.continues == kept[0] and conv.reused == count:
        digest = kept[1].copy()
        digest.add(conv.messages[count:])
        grant.last_digest = (call.seq, digest)
        return count, False, digest.hexdigest()
    digest, prefix = Digest(), None
    for n, m in enumerate(conv.messages):
        if n == count:
            prefix = digest.hexdigest()
        digest.add([m])
    if count == len(conv.messages):
        prefix = digest.hexdigest()
    grant.last_digest = (call.seq, digest)
    if last is None:
        return 0, False, digest.hexdigest()
    return (count, False, digest.hexdigest()) if prefix == last[1] else (0, True, digest.hexdigest())


def _old_row(row: dict[str, Any], index: int) -> Step:
    """A row written before the contract: the messages from its request body, read as the gateway reads it."""
    from anyswe.gateway.wire import WireError, read_request

    kept = {k: v for k, v in row.items() if k not in ("messages", "schema_version")}
    step = Step.model_validate(kept | {"index": index})
    if row.get("protocol") and row.get("request") is not None:
        with contextlib.suppress(WireError):  # a body it cannot read: the step without its messages
            step.messages = _messages(read_request(row["protocol"], row["request"]).messages)
    return step


def read_trajectory(
    path: str | Path,
    transcripts: Mapping[str, str] | None = None,
    *,
    problems: list[str] | None = None,
    text: str | None = None,
) -> list[Step]:
    """Every step of a trajectory file, old rows included, with each step's ``tool_results`` (the tool
    messages the next call brought, and what an agent's own transcript adds: ``transcripts``, a task's
    files by name, else those beside ``path``) and old rows' ``messages`` cut to what was new.

    A line that cannot be read (not UTF-8, not JSON, not a step, cut short) is an error naming the file
    and the line: given ``problems``, it goes there and the reading goes on (the report and rollouts
    show every step there is and say which line was lost; a file that cannot be read at all is one
    such error); else it is raised (:class:`ResultsError`), but for a last line cut short, which a
    writer killed mid-line leaves and which is skipped.

    ``text``: the file's text, already read (by a reader that does not follow links, decoding with
    ``surrogateescape``); ``path`` then only names it in errors."""
    p = Path(path)
    try:
        # Bytes, so that a line that is not UTF-8 is that line's located error, not the whole file's.
        # ``text`` read with surrogateescape gives back the file's own bytes.
        lines = (p.read_bytes() if text is None else text.encode(errors="surrogateescape")).split(b"\n")
    except OSError as exc:
        if problems is None:
            raise ResultsError(f"cannot read the trajectory {p}: {exc}") from None
        problems.append(f"{p}: cannot be read: {exc.strerror or exc}")
        return []
    steps: list[Step] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        cut = n == len(lines)  # the file does not end with this line's newline
        try:
            steps.append(_read_line(line, len(steps)))
        except _Unreadable as exc:
            problem = f"{p}:{n}: {'a line cut short' if cut else exc}"
            if problems is not None:
                problems.append(problem)
            elif not cut:
                raise ResultsError(problem) from None
    _cut_old_messages(steps)
    answered = [s for s in steps if s.reply is not None]
    for step, following in itertools.pairwise(answered):
        step.tool_results = _results_of(step, following)
    add_transcript_results(steps, _transcript_results(p.parent, transcripts))
    return steps


class _Unreadable(Exception):
    """Why one line of a trajectory is not a step."""


def _read_line(line: bytes, index: int) -> Step:
    try:
        text = line.decode()
    except UnicodeDecodeError as exc:
        raise _Unreadable(f"not UTF-8 (byte {line[exc.start]:#04x} at column {exc.start + 1})") from None
    try:
        row = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _Unreadable(f"not JSON ({exc.msg}: column {exc.colno})") from None
    except RecursionError:
        raise _Unreadable("not a step (JSON nested deeper than can be read)") from None
    if not isinstance(row, dict):
        raise _Unreadable(f"not a step (a JSON {type(row).__name__}, not an object)")
    try:
        return Step.model_validate(row) if "schema_version" in row else _old_row(row, index)
    except ValidationError as exc:
        raise _Unreadable(f"not a step ({first_problem(exc)})") from None


def _transcript_results(task_dir: Path, files: Mapping[str, str] | None) -> dict[str, tuple[str, bool]]:
    from anyswe.agents import transcript_readers, transcript_tool_results

    if files is None:
        names = transcript_readers()
        files = {n: (task_dir / n).read_text(errors="replace") for n in names if (task_dir / n).is_file()}
    return transcript_tool_results(files)


def _results_of(step: Step, following: Step) -> list[StepMessage]:
    """The tool results the next call brought for ``step``'s calls: its new tool messages; after a
    rewritten history (whose messages are all "new") those answering the step's calls by id, else
    (ids an agent's client renamed) those after the history's last assistant turn."""
    assert step.reply is not None
    tools = [m for m in following.messages if m.role == "tool"]
    if not following.rewritten:
        return tools
    ids = {c.id for c in step.reply.tool_calls if c.id}
    if answered := [m for m in tools if m.tool_call_id in ids]:
        return answered
    last = max((n for n, m in enumerate(following.messages) if m.role == "assistant"), default=-1)
    return [m for m in following.messages[last + 1 :] if m.role == "tool"]


def _cut_old_messages(steps: list[Step]) -> None:
    """Old rows hold the whole conversation: keep what each added to the previous one's."""
    previous: list[StepMessage] | None = None
    for step in steps:
        if step.reply is None or "schema_version" in step.model_fields_set:
            continue
        whole = step.messages
        if previous is not None and whole[: len(previous)] == previous:
            step.prior_messages, step.messages = len(previous), whole[len(previous) :]
        else:
            step.rewritten = previous is not None
        previous = whole


def add_transcript_results(steps: list[Step], results: dict[str, tuple[str, bool]]) -> None:
    """What an agent's own transcript says its tool calls returned (call id -> text, failed), where it
    holds more than the gateway saw: whether a result was an error, and the results of the last calls,
    which no later model call carried (an agent stopped at its turn cap)."""
    for step in steps:
        if step.reply is None:
            continue
        seen = {m.tool_call_id: m for m in step.tool_results}
        for call in step.reply.tool_calls:
            if call.id not in results:
                continue
            text, failed = results[call.id]
            if call.id in seen:
                seen[call.id].is_error = failed
            else:
                step.tool_results.append(StepMessage(role="tool", text=text, tool_call_id=call.id, is_error=failed))
