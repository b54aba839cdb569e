"""ATIF export: each task's trajectory as an Agent Trajectory Interchange Format v1.8 document.

ATIF is what Harbor writes for every model agent (its RFC 0001; the ``atif`` package holds the
pydantic models). anyswe's own trajectory (gateway/trajectory.py: one :class:`Step` per model call,
whatever the protocol) maps onto it as follows:

- the messages new at a call become ``system`` and ``user`` steps, in order (tool results are not
  steps: they are the observation of the call that asked for them);
- each answered call is one ``agent`` step: the reply's text and reasoning, its tool calls, the tool
  results the agent then saw as the observation (``source_call_id`` the call's id), and metrics:
  prompt tokens (cached included, as ATIF counts them), completion tokens, cached tokens, cost, and
  the policy's token ids and log-probabilities where the gateway captured them;
- a call the gateway refused (a budget or turn cap) is a ``system`` step saying so;
- the tools offered (from the first request) are the agent's ``tool_definitions``, OpenAI-style;
- ``extra`` at the root carries the task's key, instance, cell and verdict.

Every document is validated against ``atif``'s models before it is written.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from anyswe._text import escape_surrogates
from anyswe.errors import ResultsError
from anyswe.results.report_detail import run_trajectory
from anyswe.results.store import RESULTS, latest_attempts, read_results

if TYPE_CHECKING:
    from anyswe.gateway.trajectory import Step
    from anyswe.results.schema import TaskResult

SCHEMA_VERSION = "ATIF-v1.8"
#: Where ``anyswe export atif`` writes by default, inside the run directory (the report links it).
ATIF_DIR = "atif"


def export_atif(run_dir: str | Path, out: str | Path | None = None) -> list[Path]:
    """Write ``<out>/<task key>.json`` (default ``RUN/atif/``) for every task of a run whose agent
    talked to a model; return the paths written."""
    run = Path(run_dir)
    if not (run / RESULTS).is_file():
        raise ResultsError(f"{run} is not a run directory: it has no {RESULTS}")
    target = Path(out) if out is not None else run / ATIF_DIR
    agent_types = _agent_types(run)
    docs: dict[str, dict[str, Any]] = {}
    for row in latest_attempts(read_results(run / RESULTS)):
        # Read from the run directory only, as the report reads it: a row's trajectory_path (the run is
        # untrusted: it may come from elsewhere) leads nowhere out of it, through no link.
        steps = run_trajectory(run, {"key": row.key, "trajectory_path": row.trajectory_path})
        if steps is None:
            continue  # a model-free agent (gold, noop, replay of predictions): no trajectory to export
        docs[row.key] = task_atif(row, steps, agent_types.get(row.agent, row.agent))
    # All or nothing: every document made before any is written, then each put in place whole (a lone
    # surrogate in a reply as its JSON escape: UTF-8 cannot hold it, and read back it is the same string).
    if docs:
        target.mkdir(parents=True, exist_ok=True)
    made = {
        target / f"{key}.json": escape_surrogates(json.dumps(doc, indent=1, ensure_ascii=False))
        for key, doc in docs.items()
    }
    partial = [path.with_name(f".{path.name}.{os.getpid()}") for path in made]
    try:
        for tmp, text in zip(partial, made.values(), strict=True):
            tmp.write_text(text + "\n")
        for tmp, path in zip(partial, made, strict=True):
            os.replace(tmp, path)
    finally:
        for tmp in partial:
            tmp.unlink(missing_ok=True)
    return list(made)


def task_atif(row: TaskResult, steps: list[Step], agent_type: str) -> dict[str, Any]:
    """One task's ATIF document (validated), from its result row and its trajectory's steps."""
    verdict = {
        "key": row.key,
        "instance_id": row.instance_id,
        "cell": row.cell,
        "provider": row.provider,
        "sample": row.sample,
        "resolved": row.resolved,
        "reward": row.reward,
        "mask_sample": row.mask_sample,
        "exit_reason": None if row.exit_reason is None else str(row.exit_reason),
    }
    return to_atif(steps, agent=agent_type, model=row.model, session_id=row.key, cost_usd=row.cost_usd, extra=verdict)


def to_atif(
    steps: list[Step],
    *,
    agent: str,
    model: str | None = None,
    session_id: str | None = None,
    cost_usd: float | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """An ATIF v1.8 document (validated against ``atif``'s models) of anyswe's steps: a task's, or a
    rollout's (``Rollout.trajectory``). ``agent``: its type (its pinned release is looked up)."""
    usage = [s.usage for s in steps if s.reply is not None]
    final: dict[str, Any] = {
        "total_prompt_tokens": sum(u.input_tokens + u.cache_read_tokens + u.cache_write_tokens for u in usage),
        "total_completion_tokens": sum(u.output_tokens for u in usage),
        "total_cached_tokens": sum(u.cache_read_tokens for u in usage),
        "total_steps": len(usage),
        "total_cost_usd": cost_usd,
    }
    doc = {
        "schema_version": SCHEMA_VERSION,
        "session_id": session_id,
        "agent": {
            "name": agent,
            "version": _agent_version(agent),
            "model_name": model,
            "tool_definitions": _tools(steps),
        },
        "steps": atif_steps(steps),
        "final_metrics": {k: v for k, v in final.items() if v is not None},
        "extra": {"anyswe": extra} if extra else None,
    }
    return _validated(doc, session_id or "a trajectory")


def atif_steps(steps: list[Step]) -> list[dict[str, Any]]:
    """anyswe's steps (one per model call) as ATIF steps, numbered from 1."""
    out: list[dict[str, Any]] = []

    def add(step: dict[str, Any]) -> None:
        out.append({"step_id": len(out) + 1, **{k: v for k, v in step.items() if v is not None}})

    seen: set[tuple[str, str]] = set()
    for step in steps:
        stamp = _stamp(step.time)
        for m in step.messages:
            if m.role in ("system", "user") and m.text:
                # An agent that sends its history again (OpenClaw; a rewritten one) repeats its messages:
                # kept, in order, as copied context, which ATIF tells consumers to leave out of training.
                copied = (m.role, m.text) in seen or None
                seen.add((m.role, m.text))
                add({"timestamp": stamp, "source": m.role, "message": m.text, "is_copied_context": copied})
        if step.reply is None:
            add({"timestamp": stamp, "source": "system", "message": f"anyswe gateway refused the call: {step.refused}"})
            continue
        add(_agent_step(step, stamp))
    return out


def _agent_step(step: Step, stamp: str | None) -> dict[str, Any]:
    assert step.reply is not None
    calls: list[dict[str, Any]] = [
        {"tool_call_id": c.id, "function_name": c.name, "arguments": c.arguments} for c in step.reply.tool_calls
    ]
    # An agent may echo a call's id changed: OpenClaw sends ``call_0000``'s result as ``call0000``.
    ids = {_plain(c.id): c.id for c in step.reply.tool_calls}
    results = [
        {
            "source_call_id": ids.get(_plain(r.tool_call_id or "")),
            "content": r.text,
            **({"extra": {"is_error": r.is_error}} if r.is_error is not None else {}),
        }
        for r in step.tool_results
    ]
    return {
        "timestamp": stamp,
        "source": "agent",
        "model_name": step.model,
        "message": step.reply.text,
        "reasoning_content": step.reply.reasoning or None,
        "tool_calls": calls or None,
        "observation": {"results": results} if results else None,
        "metrics": _metrics(step),
        "llm_call_count": 1,
        "extra": {"protocol": step.protocol, "stop": step.reply.stop, "latency_s": step.latency_s},
    }


def _plain(call_id: str) -> str:
    return "".join(ch for ch in call_id if ch.isalnum())


def _metrics(step: Step) -> dict[str, Any]:
    u = step.usage
    metrics: dict[str, Any] = {
        # ATIF's prompt tokens include the cached ones; anyswe's input tokens are the uncached part.
        "prompt_tokens": u.input_tokens + u.cache_read_tokens + u.cache_write_tokens,
        "completion_tokens": u.output_tokens,
        "cached_tokens": u.cache_read_tokens,
        "cost_usd": step.cost_usd,
    }
    if step.tokens is not None:
        metrics.update(
            prompt_token_ids=step.tokens.prompt_token_ids,
            completion_token_ids=step.tokens.generation_token_ids,
            logprobs=step.tokens.generation_log_probs,
        )
    return {k: v for k, v in metrics.items() if v is not None}


def _tools(steps: list[Step]) -> list[dict[str, Any]] | None:
    """The tools the first request offered, as OpenAI-style function definitions."""
    from anyswe.gateway.protocols import PROTOCOLS

    for step in steps:
        request = step.request if isinstance(step.request, dict) else {}
        if not isinstance(request.get("tools"), list) or step.protocol not in PROTOCOLS.names():
            continue
        protocol = PROTOCOLS.load(step.protocol)()
        out = []
        for entry in protocol.entries(request):  # Gemini's tools entry holds many functions
            found = protocol.tool(entry) if isinstance(entry, dict) else None
            if found is not None:
                tool, schema = found
                function = {"name": tool.get("name"), "description": tool.get("description"), "parameters": schema}
                out.append({"type": "function", "function": {k: v for k, v in function.items() if v is not None}})
        return out or None
    return None


def _stamp(when: float) -> str | None:
    return datetime.fromtimestamp(when, UTC).isoformat().replace("+00:00", "Z") if when else None


def _agent_version(agent_type: str) -> str:
    from anyswe import __version__
    from anyswe.agents import AGENTS, agent_class
    from anyswe.errors import AnysweError

    if agent_type not in AGENTS:  # a dotted path a run's spec.yaml names is not imported (nor a typo)
        return f"anyswe {__version__}"
    try:
        version = agent_class(agent_type).release()
    except AnysweError:
        version = None
    return version or f"anyswe {__version__}"


def _agent_types(run: Path) -> dict[str, str]:
    """The run's agent names -> their types, from the resolved ``spec.yaml`` it keeps."""
    from anyswe._yaml import read_yaml

    spec = run / "spec.yaml"
    agents = (read_yaml(spec) or {}).get("agents") if spec.is_file() else None
    if not isinstance(agents, dict):
        return {}
    return {name: str(block.get("type", name)) for name, block in agents.items() if isinstance(block, dict)}


def _validated(doc: dict[str, Any], source: str) -> dict[str, Any]:
    from atif import Trajectory
    from pydantic import ValidationError

    doc = {k: v for k, v in doc.items() if v is not None}
    try:
        return Trajectory.model_validate(doc).to_json_dict()
    except ValidationError as exc:  # a defect of this module, named with the trajectory it came from
        raise ResultsError(f"the ATIF export of {source} does not validate: {exc}") from None
