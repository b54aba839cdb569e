"""NeMo Gym's side of a rollout: the response ``anyswe serve`` gives, in the fields and names of
nemo-gym 0.7.0's ``AnySweVerifyResponse`` (its ``anyswe_agent`` server's ``/run``), and the trajectory
as Responses output items with the policy's token ids where Gym's model server puts them.

Gym's names are mapped from anyswe's facts here and nowhere else; the reward and the mask are
execute/decide.py's, whatever Gym's own server would have decided.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from anyswe.execute.sample import Rollout
    from anyswe.gateway.trajectory import Step, StepReply

#: anyswe's exit reasons in Gym's ``agent_error_kind`` names where Gym has one.
_AGENT_ERROR_KIND = {"max_iterations": "max_iteration", "context_window": "context_window", "error": "other"}


def gym_response(
    body: Mapping[str, Any], rollout: Rollout, *, queued_s: float = 0.0, private: Sequence[str] = ()
) -> dict[str, Any]:
    """The rollout as nemo-gym's ``AnySweVerifyResponse`` (its fields and names), plus anyswe's own; what of
    the server's config an error names (``private``: its model's URL and name) is not sent."""
    from anyswe.gateway.render import responses_usage  # here: the gateway package imports aiohttp

    params = dict(body.get("responses_create_params") or {})
    output, tools = output_items(rollout.trajectory)
    first = rollout.trajectory[0].messages if rollout.trajectory else []
    inputs = [{"role": m.role, "content": m.text, "type": "message"} for m in first if m.role in ("system", "user")]
    r = rollout.result
    exit_reason = rollout.exit_reason or ""
    instance_config = {
        "instance_id": rollout.instance_id,
        "problem_info": dict(params.get("metadata") or {}),
        "agent": r.agent,
        "provider": r.provider,
        "model": params.get("model"),
        "mask_sample": rollout.mask_sample,
    }
    return {
        "responses_create_params": params | {"input": inputs, "tools": tools},
        "response": {
            "id": f"anyswe-{rollout.instance_id}",
            "created_at": int(time.time()),
            "model": params.get("model") or r.model or "anyswe",
            "object": "response",
            "output": output,
            "parallel_tool_calls": bool(params.get("parallel_tool_calls", True)),
            "tool_choice": params.get("tool_choice", "auto"),
            "tools": tools,
            "usage": responses_usage(rollout.usage),
        },
        "reward": rollout.reward,
        "mask_sample": rollout.mask_sample,
        "resolved": rollout.resolved,
        "patch_exists": bool(rollout.patch.strip()),
        "model_patch": rollout.patch or None,
        "agent_timed_out": rollout.agent_timed_out,
        "agent_error_kind": _AGENT_ERROR_KIND.get(exit_reason, exit_reason if exit_reason == "budget" else None),
        "eval_timed_out": r.tests_timed_out,
        "error_kind": _GYM_ERROR_KIND.get(rollout.error_kind or "", "eval_timeout" if r.tests_timed_out else None),
        "agent_run_time": r.time_agent,
        "instance_config": instance_config,
        "failure_kind": failure_kind(rollout),
        "failure_reason": _told(rollout.error, private)[:2000] or None,
        # anyswe's own (Gym's model ignores fields it does not declare).
        "anyswe_error_kind": rollout.error_kind,
        "mask_reason": rollout.mask_reason,
        "exit_reason": rollout.exit_reason,
        "error": _told(rollout.error, private) or None,
        "error_permanent": rollout.error_permanent,
        "flags": rollout.flags,
        "token_prefix_chain": rollout.token_prefix_chain,
        "tests_status": rollout.tests_status,
        "timings": rollout.timings | {"queued": round(queued_s, 3)},
        "key": r.key,
    }


#: anyswe's error kinds in Gym's ``error_kind`` names where Gym has one (the grader's sandbox failed:
#: "sandbox"; tests that ran out of time: "eval_timeout"). The mask is anyswe's decision either way: a
#: test timeout is not masked here, where Gym masks it (a patch that hangs its tests would buy re-rolls).
_GYM_ERROR_KIND = {"infra": "sandbox"}


def failure_kind(rollout: Rollout) -> str | None:
    """The failure in nemo_gym.failure_kinds' shared vocabulary (anyswe's own as ``anyswe:<kind>``)."""
    error = rollout.error or ""
    if rollout.error_kind == "infra":
        if "OOMKilled" in error:
            return "provider_oom_killed"
        if "upstream" in error:  # the model could not be reached
            return "transport_unreachable"
        return "session_lost" if "SandboxLost" in error else "provider_unavailable"
    if rollout.error_kind == "grading":
        return "verifier_error"
    if rollout.error_kind == "internal":
        return "anyswe:internal"
    if rollout.agent_timed_out:
        return "agent_timeout"
    if rollout.error_kind == "agent":
        return "agent_run_error"
    return "anyswe:eval_timeout" if rollout.result.tests_timed_out else None


def output_items(steps: list[Step]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The trajectory as Responses output items: each reply's reasoning, text and function calls, then
    the tool results the agent saw (from the next call). The policy's token ids and log-probs, when
    the upstream gave them, go on each call's last output item under Gym's names."""
    out: list[dict[str, Any]] = []
    tools: dict[str, dict[str, Any]] = {}
    for step in steps:
        reply = step.reply
        if reply is None:
            continue
        made = _reply_items(step.index, reply, tools)
        if step.tokens is not None and made:  # on the call's last output item, as Gym's model server puts them
            made[-1].update({k: v for k, v in step.tokens.model_dump().items() if v is not None})
        out += made
        # What the agent saw of its calls (the next request carried it).
        out += [
            {"type": "function_call_output", "call_id": m.tool_call_id or "", "output": m.text}
            for m in step.tool_results
        ]
    return out, list(tools.values())


def _reply_items(n: int, reply: StepReply, tools: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One reply as output items: its reasoning, its text, its function calls."""
    made: list[dict[str, Any]] = []
    if reply.reasoning:
        made.append(
            {"type": "reasoning", "id": f"rs_{n}", "summary": [{"type": "summary_text", "text": reply.reasoning}]}
        )
    if reply.text:
        content = [{"type": "output_text", "text": reply.text, "annotations": []}]
        made.append(
            {"type": "message", "id": f"msg_{n}", "role": "assistant", "status": "completed", "content": content}
        )
    for i, call in enumerate(reply.tool_calls):
        tools.setdefault(call.name, {"type": "function", "name": call.name, "parameters": {}, "strict": False})
        made.append(
            {
                "type": "function_call",
                "id": f"fc_{n}_{i}",
                "call_id": call.id or f"call_{n}_{i}",
                "name": call.name,
                "arguments": json.dumps(call.arguments),
                "status": "completed",
            }
        )
    return made


def _told(error: str | None, private: Sequence[str]) -> str:
    """``error`` as a client is told it: each of ``private`` (longest first) replaced by what it is."""
    text = error or ""
    for value in private:
        text = text.replace(value, "<the server's model>")
    return text
