"""A task's grant at the gateway: its budget, what it has used, and what calls in flight may still use.

A budget is checked and reserved in one step, with no await between (:meth:`Grant.admit`), before
the upstream is asked: a call in flight counts as a call, and holds the most tokens it may use, so
parallel calls cannot all pass a check made before any of them is accounted. When the call ends its
reservation is replaced by what it really used (:meth:`Grant.settle`), or given back if it failed
(:meth:`Grant.release`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from anyswe.gateway.wire import Usage

if TYPE_CHECKING:
    from anyswe.gateway.errors import UpstreamError
    from anyswe.gateway.server import Upstream
    from anyswe.gateway.trajectory import Answered, Refused
    from anyswe.gateway.wire import Digest, Message
    from anyswe.model import PriceSpec

#: Calls in a row with no connection to the upstream (each after the gateway's own retries, about
#: 3.5 s of backoff) after which a task's model counts as down: its later calls are refused at once,
#: and the attempt is infra, run again. An agent's own retries (OpenClaw, OpenCode and Cline back off
#: for minutes) would only wait on a server that is not there. A rate limit or an overloaded server
#: (429, 5xx) is not this: it passes on to the agent, whose retries may well get through.
UNREACHABLE_CALLS = 2
#: The request fields that cap a reply's tokens, per protocol (whichever the request sets).
_OUTPUT_CAPS = ("max_tokens", "max_completion_tokens", "max_output_tokens")


@dataclass
class Budget:
    """Per-task limits; None is unlimited. A call past one is refused and the task marked ``budget``."""

    calls: int | None = None
    tokens: int | None = None
    seconds: float | None = None
    #: The agent's own turn cap, for agents that have none (a call past it ends the task at max_iterations).
    turns: int | None = None


@dataclass(frozen=True)
class Limits:
    """The gateway's own bounds on every task, whatever its budget says (a budget may be unset)."""

    #: A request body larger than this is refused (413) unread.
    request_bytes: int = 16 * 1024 * 1024
    #: Request bytes one task's calls may have recorded; a call past it is refused.
    task_bytes: int = 1024 * 1024 * 1024
    #: Calls one task may make, whatever its budget (a task without one is not unbounded).
    task_calls: int = 10_000
    #: Seconds a connection has to send a request's headers, from its start or its last reply (idle
    #: keep-alive connections are closed after as long).
    header_seconds: float = 60.0
    #: Seconds a request has to send its body once its headers are in.
    body_seconds: float = 120.0


@dataclass(frozen=True)
class Reservation:
    """What one admitted call holds until it settles: one call, ``tokens`` of the token budget and its
    request's ``size`` in bytes of the task's recording cap."""

    tokens: int
    size: int = 0


def token_bound(body: Any, size: int) -> int | None:
    """The most tokens a request may use: its input (no more tokens than bytes) plus its output cap.

    None when the request sets no output cap (it may then use whatever is left).
    """
    caps = [body.get(k) for k in _OUTPUT_CAPS] if isinstance(body, dict) else []
    cap = next((c for c in caps if isinstance(c, int) and not isinstance(c, bool) and c >= 0), None)
    return None if cap is None else size + cap


@dataclass
class Grant:
    """One task's access: its model, upstream, trajectory file, usage so far and budget."""

    key: str
    model: str
    upstream: Upstream
    trajectory: Path | None = None
    budget: Budget = field(default_factory=Budget)
    calls: int = 0
    usage: Usage = field(default_factory=Usage)
    exhausted: str | None = None
    first_call: float | None = None
    #: Why the upstream refused for good (e.g. a replay that diverged): the task's error.
    failed: str | None = None
    #: Calls the upstream failed (rate limits, server errors) that the agent may have retried.
    upstream_errors: int = 0
    #: The last failure that says the model was unreachable (a connection, a 5xx, a 429), if any.
    unavailable: str | None = None
    #: Calls in a row that could not connect to the upstream at all, and, once there were
    #: :data:`UNREACHABLE_CALLS` of them, why the gateway answers this task's calls no more.
    unreachable_streak: int = 0
    down: str | None = None
    #: Why a call could not be recorded (the host's disk): the task's trajectory is incomplete (infra).
    unrecorded: str | None = None
    #: Why a call could not be made a trajectory step because of what the agent sent: its own failure.
    unrecordable: str | None = None
    active: bool = True
    #: Calls admitted whose upstream has not answered yet, and the tokens they hold.
    pending_calls: int = 0
    pending_tokens: int = 0
    #: Request bytes this task's calls may have recorded (None: no cap), those recorded, those in flight.
    record_cap: int | None = None
    #: Calls this task may make whatever its budget says (the gateway's own cap; None: none).
    call_cap: int | None = None
    recorded: int = 0
    pending_bytes: int = 0
    #: Calls refused (budget or recording cap) so far; whether the trajectory notes the cap's refusal.
    refused: int = 0
    cap_noted: bool = False
    #: Steps recorded so far, and the last recorded call's (message count, conversation hash).
    steps: int = 0
    last_conversation: tuple[int, str] | None = None
    #: The model's prices, for each step's cost (None: unpriced).
    prices: PriceSpec | None = None
    #: Calls read so far (each call's number, by which a step knows the call it continues).
    reads: int = 0
    #: A chat completions task's last call read: its number, its messages as sent and as read. A call
    #: that continues them reads its new ones only (wire.read_request's ``known``).
    chat_read: tuple[int, list[Any], list[Message]] | None = None
    #: The last step written: its call's number and its conversation's digest, which the next step
    #: extends with its new messages only when its call continues that one (trajectory._prior).
    last_digest: tuple[int, Digest] | None = None
    #: Calls answered whose steps are not yet written (the answer goes first), and the open trajectory.
    unwritten: list[Answered | Refused] = field(default_factory=list)
    trajectory_file: BinaryIO | None = None
    #: Whether the calls' token ids form one growing prefix chain (each prompt starts with the previous
    #: prompt and its generation): None until a call brings token ids; False once one breaks it
    #: (compaction, a retry, a rewritten history), i.e. the rollout is off-policy.
    prefix_chain: bool | None = None
    last_tokens: list[int] | None = None

    def chain(self, tokens: dict[str, list[Any]] | None) -> None:
        """Follow the prefix chain with one call's tokens (a call without prompt ids breaks it)."""
        prompt = (tokens or {}).get("prompt_token_ids")
        if prompt is None:
            if self.prefix_chain is not None:
                self.prefix_chain = False
            return
        follows = self.last_tokens is None or prompt[: len(self.last_tokens)] == self.last_tokens
        self.prefix_chain = follows and self.prefix_chain is not False
        self.last_tokens = [*prompt, *((tokens or {}).get("generation_token_ids") or [])]

    def tokens_held(self) -> int:
        """Tokens used so far plus those reserved by calls in flight."""
        return self.usage.input_tokens + self.usage.output_tokens + self.pending_tokens

    def over_budget(self) -> str | None:
        """The limit a new call would pass (calls in flight count as made), or None."""
        calls = self.calls + self.pending_calls
        if self.budget.turns is not None and calls >= self.budget.turns:
            return f"turns ({self.budget.turns})"
        if self.budget.calls is not None and calls >= self.budget.calls:
            return f"calls ({self.budget.calls})"
        started, seconds = self.first_call, self.budget.seconds
        if seconds is not None and started is not None and time.monotonic() - started >= seconds:
            return f"seconds ({seconds:g})"
        if self.budget.tokens is not None and self.tokens_held() >= self.budget.tokens:
            return f"tokens ({self.budget.tokens})"
        return None

    def admit(self, body: Any, size: int) -> Reservation | str:
        """Check the budget and reserve this call's share at once: its Reservation, or the limit refusing it.

        Synchronous on purpose: nothing else runs on the event loop between the check and the
        reservation. ``size``: the request body's bytes (a bound on its input tokens).
        """
        limit = self.over_budget()
        cap = self.record_cap
        if limit is None and cap is not None and self.recorded + self.pending_bytes + size > cap:
            limit = f"recorded bytes ({cap})"
        if limit is None and self.call_cap is not None and self.calls + self.pending_calls >= self.call_cap:
            limit = f"calls (the gateway's cap, {self.call_cap})"
        if limit is not None:
            self.exhausted = self.exhausted or limit
            self.refused += 1
            return limit
        tokens = 0
        if self.budget.tokens is not None:
            left = self.budget.tokens - self.tokens_held()
            bound = token_bound(body, size)
            tokens = left if bound is None else min(left, bound)
        self.pending_calls += 1
        self.pending_tokens += tokens
        self.pending_bytes += size
        self.first_call = self.first_call or time.monotonic()
        return Reservation(tokens, size)

    def release(self, held: Reservation) -> None:
        """Give back a call's reservation (it failed, or is about to be settled)."""
        self.pending_calls -= 1
        self.pending_tokens -= held.tokens
        self.pending_bytes -= held.size

    def failed_call(self, exc: UpstreamError) -> bool:
        """Count a call the upstream failed (after the gateway's own retries); True when the upstream is
        now taken to be down for this task: :data:`UNREACHABLE_CALLS` calls in a row found no server."""
        self.upstream_errors += 1
        if exc.status >= 500 or exc.status == 429:
            self.unavailable = f"{exc.status}: {str(exc)[:300]}"
        self.unreachable_streak = self.unreachable_streak + 1 if exc.unreachable else 0
        if self.unreachable_streak >= UNREACHABLE_CALLS:
            self.down = (
                f"the model's upstream is unreachable ({self.unreachable_streak} calls in a row): {str(exc)[:300]}"
            )
        return self.down is not None

    def settle(self, held: Reservation, usage: Usage) -> None:
        """Replace a call's reservation with what it really used."""
        self.release(held)
        self.unreachable_streak = 0
        self.calls += 1
        self.usage = self.usage + usage
        self.recorded += held.size
