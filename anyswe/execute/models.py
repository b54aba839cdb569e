"""The driver's side of model calls: a grant per task, its usage settled into the outcome.

The gateway runs in the driver (upstream keys stay in one process; execute/session.py starts it).
Each task that has a model gets a grant as it starts: its own token, its trajectory file in the run
directory, its budget, and an upstream (the scripted model: its script, or the oracle made from the
instance's reference patch, which only the host holds); the grant settles the task's usage when it ends.
"""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import json
from pathlib import Path

from anyswe.agents import ExitReason
from anyswe.execute.unit import TaskOutput, WorkUnit
from anyswe.execute.upstreams import upstream_source
from anyswe.gateway import Budget, Gateway, Grant
from anyswe.gateway.relay import join_address
from anyswe.gateway.server import Upstream
from anyswe.model import ModelEndpoint, ModelSpec
from anyswe.results.schema import Failure

TRAJECTORY = "trajectory.jsonl"


def is_loopback(host: str) -> bool:
    """Whether ``host`` is this machine's loopback (what other machines cannot reach)."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"


async def grant(gateway: Gateway | None, unit: WorkUnit, task_dir: Path) -> tuple[WorkUnit, str | None]:
    """The unit with its model endpoint (a fresh per-task token, and a socket of the task's own for its
    sandbox), and the token to revoke afterwards (which removes the socket)."""
    if gateway is None or unit.model is None or unit.cell.model is None:
        return unit, None
    model = unit.model
    budget = Budget(
        calls=model.budget.calls,
        tokens=model.budget.tokens,
        seconds=model.budget.seconds,
        turns=unit.gateway_turns,
    )
    upstream: Upstream = upstream_source(model.upstream_name).make(unit, model)
    trajectory = task_dir / TRAJECTORY
    token = gateway.grant(
        unit.key, unit.cell.model, upstream, trajectory=trajectory, budget=budget, prices=model.prices
    )
    endpoint = ModelEndpoint(
        name=unit.cell.model,
        api=model.agent_protocol,
        model=model.model,
        base_url=gateway.url(),
        token=token,
        params=model.params,
    )
    if gateway.relay_host is not None:
        # Where the unit runs, this machine's socket and loopback mean nothing: only the relay address
        # (the node's relay gives the unit a socket of its own).
        relay = join_address(gateway.relay_host, gateway.ports[gateway.relay_host])
        endpoint = endpoint.model_copy(update={"base_url": None, "socket": None, "relay": relay})
    elif gateway.socket is not None:
        try:
            socket = await gateway.open_socket(token)
        except BaseException:
            gateway.revoke(token)
            raise
        endpoint = endpoint.model_copy(update={"socket": str(socket)})
    return dataclasses.replace(unit, endpoint=endpoint), token


def settle(output: TaskOutput, used: Grant, task_dir: Path, model: ModelSpec | None = None) -> TaskOutput:
    """The grant's part of the outcome: its count of the calls settles the usage (cost priced here, once,
    from the model's prices), a cap it kept ends the exit, and a failure of its own is appended."""
    outcome = output.outcome
    usage: dict[str, object] = {"model_calls": used.calls, **vars(used.usage)}
    if not outcome.usage.turns:  # an agent that does not count its turns: each model call is one
        usage["turns"] = used.calls
    if model is not None and model.params:
        usage["model_params"] = json.dumps(model.params, sort_keys=True)
    if used.prefix_chain is not None:
        usage["token_prefix_chain"] = used.prefix_chain
    if model is not None and model.mask_off_policy:
        usage["mask_off_policy"] = True
    if model is not None and model.prices is not None:
        usage["cost_usd"] = model.prices.cost(*vars(used.usage).values())
    if (task_dir / TRAJECTORY).is_file():
        usage["trajectory_path"] = f"tasks/{task_dir.name}/{TRAJECTORY}"
    exit, failure = outcome.exit, None
    gave_up = exit.reason in (ExitReason.ERROR, ExitReason.TIMEOUT)
    unfailed = not outcome.failures
    if used.unrecorded is not None and unfailed:
        failure = Failure(kind="infra", source="grant", message=used.unrecorded)
    elif used.unrecordable is not None and unfailed:
        failure = Failure(kind="agent", source="grant", message=used.unrecordable)
    elif used.unavailable is not None and (gave_up or used.down is not None) and unfailed:
        # The model could not be reached (a dead endpoint, an outage): the sample says nothing about
        # the agent; run it again (in the apply's retries, and by the next apply). A model the gateway
        # found down was cut off from the agent whatever the agent then said of its end.
        error = f"the model's upstream failed ({used.upstream_errors} calls; last {used.unavailable})"
        failure = Failure(kind="infra", source="grant", message=error)
    elif used.failed is not None and unfailed:
        failure = Failure(kind="agent", source="grant", message=used.failed)
        exit = dataclasses.replace(exit, reason=ExitReason.ERROR)
    elif used.exhausted is not None and unfailed:
        # The agent's turn cap, kept by the gateway for agents without one, is a step limit.
        turns = used.exhausted.startswith("turns")
        reason = ExitReason.MAX_ITERATIONS if turns else ExitReason.BUDGET
        detail = f"{'turn cap reached' if turns else 'budget exhausted'}: {used.exhausted}"
        exit = dataclasses.replace(exit, reason=reason, by="gateway", detail=detail)
    void = (failure is not None and failure.kind == "infra") or outcome.facts().error_kind == "infra"
    if void and "trajectory_path" in usage:
        # The task runs again, and its next attempt writes trajectory.jsonl afresh: this attempt's
        # calls (spent, and paid for) stay under a name of their own, which its row points at.
        kept = f"trajectory.attempt-{outcome.record.identity.attempt}.jsonl"
        with contextlib.suppress(OSError):
            (task_dir / TRAJECTORY).replace(task_dir / kept)
            usage["trajectory_path"] = f"tasks/{task_dir.name}/{kept}"
    outcome = outcome.settled(usage, exit)
    return dataclasses.replace(output, outcome=outcome if failure is None else outcome.failed(failure))
