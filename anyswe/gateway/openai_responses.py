"""An OpenAI Responses upstream reached directly (gateway/http1.py), as openai_chat.py reaches chat completions.

The other shape a policy server speaks: NeMo Gym's model server answers ``/v1/responses`` with the
policy's token ids and log-probs on the output items (``prompt_token_ids``, ``generation_token_ids``,
``generation_log_probs``: its ``*ForTraining`` items), and vLLM serves the protocol natively. The
gateway builds the request itself (an agent that speaks Responses has its own input items, tools and
instructions sent as written; another's conversation is translated), posts it over the same pooled
connections and retries as chat completions, and reads text, reasoning, function calls, usage and tokens
back into the neutral reply.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from anyswe.gateway.errors import UpstreamError
from anyswe.gateway.openai_chat import post
from anyswe.gateway.wire import Conversation, Reply, ToolCall, Usage, tool_args

if TYPE_CHECKING:
    from anyswe.model import ModelSpec

#: The token fields a training model server puts on an output item (Gym's names).
TOKEN_FIELDS = ("prompt_token_ids", "generation_token_ids", "generation_log_probs")


def input_items(conv: Conversation) -> list[dict[str, Any]]:
    """The neutral conversation as Responses input items."""
    items: list[dict[str, Any]] = []
    for m in conv.messages:
        if m.role == "tool":
            items.append({"type": "function_call_output", "call_id": m.tool_call_id or "", "output": m.text})
            continue
        if m.text or not m.tool_calls:
            items.append({"type": "message", "role": m.role, "content": m.text})
        items += [
            {"type": "function_call", "call_id": c.id, "name": c.name, "arguments": json.dumps(c.arguments)}
            for c in m.tool_calls
        ]
    return items


def request_body(spec: ModelSpec, conv: Conversation) -> dict[str, Any]:
    """The Responses request: the agent's own input, instructions and tools when it spoke Responses,
    else the conversation translated; the spec's params (``max_tokens`` as ``max_output_tokens``)."""
    if conv.protocol == "openai-responses" and conv.body is not None:
        kept = {k: conv.body[k] for k in ("input", "instructions", "tools") if conv.body.get(k) is not None}
    else:
        kept = {"input": input_items(conv)}
        tools = [
            {"type": "function", "name": name, "parameters": schema or {"type": "object"}}
            | ({"description": conv.tool_descriptions[name]} if name in conv.tool_descriptions else {})
            for name, schema in conv.tools.items()
        ]
        if tools:
            kept["tools"] = tools
    params = dict(spec.params)
    if "max_tokens" in params:
        params["max_output_tokens"] = params.pop("max_tokens")
    return {"model": spec.model, **kept, **params, "store": False}


def read_reply(data: dict[str, Any]) -> Reply:
    """A Responses answer as the neutral reply, with the policy's tokens from the last output item
    that carries them."""
    items = data.get("output")
    if not isinstance(items, list):
        raise UpstreamError(502, f"the upstream's reply has no output: {str(data)[:300]}")
    text, reasoning, calls, tokens = "", [], [], None
    for item in items:
        kind = item.get("type")
        if kind == "message":
            text += "".join(p.get("text", "") for p in item.get("content") or [] if isinstance(p, dict))
        elif kind == "reasoning":
            parts = [*(item.get("summary") or []), *(item.get("content") or [])]
            reasoning += [p.get("text", "") for p in parts if isinstance(p, dict) and p.get("text")]
        elif kind == "function_call":
            calls.append(
                ToolCall(item.get("call_id") or item.get("id") or "", item["name"], tool_args(item.get("arguments")))
            )
        if any(item.get(f) is not None for f in TOKEN_FIELDS):
            tokens = {f: list(item[f]) for f in TOKEN_FIELDS if item.get(f) is not None}
    usage = data.get("usage") or {}
    details = usage.get("input_tokens_details") or {}
    cut = (data.get("incomplete_details") or {}).get("reason") == "max_output_tokens"
    return Reply(
        text=text,
        reasoning="\n".join(reasoning) or None,
        tool_calls=calls,
        usage=Usage(
            input_tokens=int(usage.get("input_tokens") or 0),
            output_tokens=int(usage.get("output_tokens") or 0),
            cache_read_tokens=int(details.get("cached_tokens") or 0),
        ),
        stop="max_tokens" if cut else ("tool_use" if calls else "end"),
        tokens=tokens,
    )


async def post_responses(url: str, body: dict[str, Any], headers: dict[str, str], model: str) -> Reply:
    """POST a Responses request (openai_chat.post: its retries, its errors)."""
    return await post(url, body, headers, model, read_reply)
