"""Replies written back in the agent's protocol: one JSON body, or the server-sent events the
official APIs send (usage included), shaped after the official SDKs' types (the tests parse them with
those SDKs); errors in each protocol's own shape. The neutral types are wire.py's."""

from __future__ import annotations

import json
import time
import typing
import uuid
from collections.abc import Iterator
from typing import Any

from anyswe.gateway.wire import Protocol, Reply, ToolCall, Usage

# -- writing replies ----------------------------------------------------------------------------


def _id(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:24]}"


_ANTHROPIC_STOP = {"end": "end_turn", "tool_use": "tool_use", "max_tokens": "max_tokens"}
_CHAT_STOP = {"end": "stop", "tool_use": "tool_calls", "max_tokens": "length"}


def _anthropic_usage(u: Usage) -> dict[str, int]:
    cache = {"cache_creation_input_tokens": u.cache_write_tokens, "cache_read_input_tokens": u.cache_read_tokens}
    return {"input_tokens": u.input_tokens, "output_tokens": u.output_tokens, **cache}


def _chat_usage(u: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": u.input_tokens,
        "completion_tokens": u.output_tokens,
        "total_tokens": u.input_tokens + u.output_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cache_read_tokens},
    }


class TokenCounts(typing.Protocol):
    """What a usage block is made of: the gateway's per-call :class:`Usage`, a rollout's summed usage."""

    @property
    def input_tokens(self) -> int: ...
    @property
    def output_tokens(self) -> int: ...
    @property
    def cache_read_tokens(self) -> int: ...


def responses_usage(u: TokenCounts) -> dict[str, Any]:
    """``u`` as the Responses API's ``usage`` object (the gateway's replies, Gym's rollout responses)."""
    return {
        "input_tokens": u.input_tokens,
        "input_tokens_details": {"cached_tokens": u.cache_read_tokens},
        "output_tokens": u.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": u.input_tokens + u.output_tokens,
    }


def _anthropic_message(reply: Reply, model: str, msg_id: str) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] if reply.text else []
    content += [{"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments} for c in reply.tool_calls]
    return {
        "id": msg_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": _ANTHROPIC_STOP[reply.stop],
        "stop_sequence": None,
        "usage": _anthropic_usage(reply.usage),
    }


def _chat_tool_call(c: ToolCall) -> dict[str, Any]:
    return {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}


def _responses_items(reply: Reply) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if reply.reasoning:
        summary = [{"type": "summary_text", "text": reply.reasoning}]
        items.append({"type": "reasoning", "id": _id("rs_"), "summary": summary, "status": "completed"})
    if reply.text:
        part = {"type": "output_text", "text": reply.text, "annotations": [], "logprobs": []}
        items.append(
            {"type": "message", "id": _id("msg_"), "status": "completed", "role": "assistant", "content": [part]}
        )
    for c in reply.tool_calls:
        items.append(
            {
                "type": "function_call",
                "id": _id("fc_"),
                "call_id": c.id,
                "name": c.name,
                "arguments": json.dumps(c.arguments),
                "status": "completed",
            }
        )
    return items


def _response(reply: Reply | None, model: str, resp_id: str, items: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": resp_id,
        "object": "response",
        "created_at": int(time.time()),
        "status": "completed" if reply is not None else "in_progress",
        "model": model,
        "output": items,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": responses_usage(reply.usage) if reply is not None else None,
    }


def chat_json(reply: Reply, model: str) -> dict[str, Any]:
    """A chat completion."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if reply.reasoning:  # as vLLM's reasoning parsers and DeepSeek return it (Anthropic's needs a signature)
        message["reasoning_content"] = reply.reasoning
    if reply.tool_calls:
        message["tool_calls"] = [_chat_tool_call(c) for c in reply.tool_calls]
    return {
        "id": _id("chatcmpl-"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": _CHAT_STOP[reply.stop]}],
        "usage": _chat_usage(reply.usage),
    }


def anthropic_json(reply: Reply, model: str) -> dict[str, Any]:
    """An Anthropic message."""
    return _anthropic_message(reply, model, _id("msg_"))


def responses_json(reply: Reply, model: str) -> dict[str, Any]:
    """An OpenAI response."""
    return _response(reply, model, _id("resp_"), _responses_items(reply))


def _chunks(text: str, size: int = 16) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _sse(event: str | None, data: dict[str, Any]) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


def anthropic_stream(reply: Reply, model: str) -> Iterator[bytes]:
    start = _anthropic_message(Reply(usage=Usage(input_tokens=reply.usage.input_tokens)), model, _id("msg_"))
    start.update(content=[], stop_reason=None)
    start["usage"]["output_tokens"] = 1
    yield _sse("message_start", {"type": "message_start", "message": start})
    index = 0
    if reply.text:
        yield _sse(
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        )
        for piece in _chunks(reply.text):
            delta = {"type": "text_delta", "text": piece}
            yield _sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})
        yield _sse("content_block_stop", {"type": "content_block_stop", "index": 0})
        index = 1
    for i, c in enumerate(reply.tool_calls, start=index):
        block = {"type": "tool_use", "id": c.id, "name": c.name, "input": {}}
        yield _sse("content_block_start", {"type": "content_block_start", "index": i, "content_block": block})
        for piece in _chunks(json.dumps(c.arguments)):
            delta = {"type": "input_json_delta", "partial_json": piece}
            yield _sse("content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta})
        yield _sse("content_block_stop", {"type": "content_block_stop", "index": i})
    stopped: dict[str, Any] = {"stop_reason": _ANTHROPIC_STOP[reply.stop], "stop_sequence": None}
    yield _sse("message_delta", {"type": "message_delta", "delta": stopped, "usage": _anthropic_usage(reply.usage)})
    yield _sse("message_stop", {"type": "message_stop"})


def chat_stream(reply: Reply, model: str, include_usage: bool) -> Iterator[bytes]:
    base = {"id": _id("chatcmpl-"), "object": "chat.completion.chunk", "created": int(time.time()), "model": model}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return _sse(None, {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    yield chunk({"role": "assistant", "content": ""})
    for piece in _chunks(reply.reasoning) if reply.reasoning else ():
        yield chunk({"reasoning_content": piece})
    if reply.text:
        for piece in _chunks(reply.text):
            yield chunk({"content": piece})
    for k, c in enumerate(reply.tool_calls):
        first = {"index": k, "id": c.id, "type": "function", "function": {"name": c.name, "arguments": ""}}
        yield chunk({"tool_calls": [first]})
        for piece in _chunks(json.dumps(c.arguments)):
            yield chunk({"tool_calls": [{"index": k, "function": {"arguments": piece}}]})
    yield chunk({}, _CHAT_STOP[reply.stop])
    if include_usage:
        yield _sse(None, {**base, "choices": [], "usage": _chat_usage(reply.usage)})
    yield b"data: [DONE]\n\n"


def responses_stream(reply: Reply, model: str) -> Iterator[bytes]:
    resp_id, seq = _id("resp_"), iter(range(1 << 30))

    def ev(kind: str, **data: Any) -> bytes:
        return _sse(kind, {"type": kind, "sequence_number": next(seq), **data})

    yield ev("response.created", response=_response(None, model, resp_id, []))
    yield ev("response.in_progress", response=_response(None, model, resp_id, []))
    items = _responses_items(reply)
    for n, item in enumerate(items):
        if item["type"] == "message":
            yield ev(
                "response.output_item.added", output_index=n, item={**item, "status": "in_progress", "content": []}
            )
            empty = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            where = {"item_id": item["id"], "output_index": n, "content_index": 0}
            yield ev("response.content_part.added", **where, part=empty)
            for piece in _chunks(reply.text):
                yield ev("response.output_text.delta", **where, delta=piece, logprobs=[])
            yield ev("response.output_text.done", **where, text=reply.text, logprobs=[])
            yield ev("response.content_part.done", **where, part=item["content"][0])
        elif item["type"] == "reasoning":
            yield ev(
                "response.output_item.added", output_index=n, item={**item, "summary": [], "status": "in_progress"}
            )
        else:
            yield ev(
                "response.output_item.added", output_index=n, item={**item, "arguments": "", "status": "in_progress"}
            )
            for piece in _chunks(item["arguments"]):
                yield ev("response.function_call_arguments.delta", item_id=item["id"], output_index=n, delta=piece)
            yield ev(
                "response.function_call_arguments.done", item_id=item["id"], output_index=n, arguments=item["arguments"]
            )
        yield ev("response.output_item.done", output_index=n, item=item)
    yield ev("response.completed", response=_response(reply, model, resp_id, items))


def render_json(protocol: Protocol, reply: Reply, model: str) -> dict[str, Any]:
    """The non-streaming response body, in ``protocol``'s shape."""
    from anyswe.gateway.protocols import wire_protocol

    return wire_protocol(protocol).render_json(reply, model)


def render_stream(protocol: Protocol, reply: Reply, model: str, *, include_usage: bool = False) -> Iterator[bytes]:
    """The server-sent events of a streamed reply, in the order the official API sends them."""
    from anyswe.gateway.protocols import wire_protocol

    return wire_protocol(protocol).render_stream(reply, model, include_usage)


def render_error(
    protocol: Protocol, status: int, message: str, kind: str = "invalid_request_error", code: str | None = None
) -> dict[str, Any]:
    """An error body in the protocol's own shape (``code``: the upstream's, where the protocol has one)."""
    from anyswe.gateway.protocols import wire_protocol

    return wire_protocol(protocol).render_error(status, message, kind, code)


def openai_error(status: int, message: str, kind: str, code: str | None = None) -> dict[str, Any]:
    """An error body as OpenAI's APIs (and most servers that speak them) write one."""
    return {"error": {"message": message, "type": kind, "param": None, "code": code or str(status)}}
