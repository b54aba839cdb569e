"""The three model protocols on the wire: requests read into one neutral form, replies written back.

Anthropic Messages, OpenAI Chat Completions and OpenAI Responses, each as one JSON body or as the
server-sent events the official APIs send (usage included), shaped after the official SDKs' types
(the tests parse them with those SDKs). The neutral form is what anyswe itself needs of a call:
the conversation (for the scripted model and the trajectory) and the reply (text, tool calls,
usage, why it stopped).
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

Protocol = Literal["anthropic-messages", "openai-chat", "openai-responses"]
Stop = Literal["end", "tool_use", "max_tokens"]


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]


@dataclass
class Message:
    """One turn: ``role`` is system, user, assistant or tool (a tool result, with ``tool_call_id``)."""

    role: str
    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str | None = None


@dataclass
class Conversation:
    """What a request asks: the messages so far, the tools offered, and how to answer."""

    model: str
    messages: list[Message]
    tools: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> JSON schema of its input
    stream: bool = False
    include_usage: bool = False  # openai-chat: stream_options.include_usage


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(*(a + b for a, b in zip(vars(self).values(), vars(other).values(), strict=True)))


@dataclass
class Reply:
    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    stop: Stop = "end"


class WireError(ValueError):
    """A request body that is not what its protocol says."""


def conversation_hash(messages: list[Message]) -> str:
    """A digest of what was said (roles, texts, tool calls and results), whatever the protocol or call ids."""
    said = [(m.role, m.text, [(c.name, c.arguments) for c in m.tool_calls]) for m in messages]
    return hashlib.sha256(json.dumps(said, sort_keys=True).encode()).hexdigest()


# -- reading requests ---------------------------------------------------------------------------


def _text(content: Any) -> str:
    """Text of a content field: a string, or a list of parts with ``text``."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return "" if content is None else str(content)


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    try:
        parsed = json.loads(raw or "{}")
    except json.JSONDecodeError:
        return {"_unparsed": raw}
    return parsed if isinstance(parsed, dict) else {"_value": parsed}


def _anthropic_messages(body: dict[str, Any]) -> list[Message]:
    out = [Message("system", _text(body["system"]))] if body.get("system") else []
    for m in body.get("messages") or []:
        content = m.get("content")
        if isinstance(content, str):
            out.append(Message(m.get("role", "user"), content))
            continue
        msg = Message(m.get("role", "user"))
        for block in content or []:
            kind = block.get("type")
            if kind == "text":
                msg.text += block.get("text", "")
            elif kind == "tool_use":
                msg.tool_calls.append(ToolCall(block["id"], block["name"], _arguments(block.get("input"))))
            elif kind == "tool_result":
                out.append(Message("tool", _text(block.get("content")), tool_call_id=block.get("tool_use_id")))
        if msg.text or msg.tool_calls:
            out.append(msg)
    return out


def _chat_messages(body: dict[str, Any]) -> list[Message]:
    out = []
    for m in body.get("messages") or []:
        role = "system" if m.get("role") == "developer" else m.get("role", "user")
        calls = [
            ToolCall(c["id"], c["function"]["name"], _arguments(c["function"].get("arguments")))
            for c in m.get("tool_calls") or []
        ]
        out.append(Message(role, _text(m.get("content")), calls, m.get("tool_call_id")))
    return out


def _responses_messages(body: dict[str, Any]) -> list[Message]:
    out = [Message("system", body["instructions"])] if body.get("instructions") else []
    items = body.get("input")
    if isinstance(items, str):
        return [*out, Message("user", items)]
    for item in items or []:
        kind = item.get("type", "message")
        if kind == "message":
            role = "system" if item.get("role") == "developer" else item.get("role", "user")
            out.append(Message(role, _text(item.get("content"))))
        elif kind == "function_call":
            call = ToolCall(item.get("call_id") or item.get("id", ""), item["name"], _arguments(item.get("arguments")))
            if out and out[-1].role == "assistant" and not out[-1].text:
                out[-1].tool_calls.append(call)
            else:
                out.append(Message("assistant", tool_calls=[call]))
        elif kind == "function_call_output":
            out.append(Message("tool", _text(item.get("output")), tool_call_id=item.get("call_id")))
    return out


def _tools(protocol: Protocol, body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    tools = {}
    for t in body.get("tools") or []:
        if protocol == "anthropic-messages" and "name" in t:
            tools[t["name"]] = t.get("input_schema") or {}
        elif protocol == "openai-chat" and t.get("type") == "function":
            tools[t["function"]["name"]] = t["function"].get("parameters") or {}
        elif protocol == "openai-responses" and t.get("type") == "function":
            tools[t["name"]] = t.get("parameters") or {}
    return tools


def read_request(protocol: Protocol, body: Any) -> Conversation:
    """The neutral form of a request body; :class:`WireError` when it is not one of ``protocol``."""
    if not isinstance(body, dict) or not isinstance(body.get("model"), str):
        raise WireError("the request body must be a JSON object with a `model`")
    try:
        messages = {
            "anthropic-messages": _anthropic_messages,
            "openai-chat": _chat_messages,
            "openai-responses": _responses_messages,
        }[protocol](body)
    except (KeyError, TypeError, AttributeError) as exc:
        raise WireError(f"malformed {protocol} request: {type(exc).__name__} {exc}") from None
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    return Conversation(body["model"], messages, _tools(protocol, body), bool(body.get("stream")), include_usage)


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


def _responses_usage(u: Usage) -> dict[str, Any]:
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
        "usage": _responses_usage(reply.usage) if reply is not None else None,
    }


def render_json(protocol: Protocol, reply: Reply, model: str) -> dict[str, Any]:
    """The non-streaming response body."""
    if protocol == "anthropic-messages":
        return _anthropic_message(reply, model, _id("msg_"))
    if protocol == "openai-chat":
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
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
    return _response(reply, model, _id("resp_"), _responses_items(reply))


def _chunks(text: str, size: int = 16) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _sse(event: str | None, data: dict[str, Any]) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


def _anthropic_stream(reply: Reply, model: str) -> Iterator[bytes]:
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


def _chat_stream(reply: Reply, model: str, include_usage: bool) -> Iterator[bytes]:
    base = {"id": _id("chatcmpl-"), "object": "chat.completion.chunk", "created": int(time.time()), "model": model}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return _sse(None, {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    yield chunk({"role": "assistant", "content": ""})
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


def _responses_stream(reply: Reply, model: str) -> Iterator[bytes]:
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


def render_stream(protocol: Protocol, reply: Reply, model: str, *, include_usage: bool = False) -> Iterator[bytes]:
    """The server-sent events of a streamed reply, in the order the official API sends them."""
    if protocol == "anthropic-messages":
        return _anthropic_stream(reply, model)
    if protocol == "openai-chat":
        return _chat_stream(reply, model, include_usage)
    return _responses_stream(reply, model)


def render_error(protocol: Protocol, status: int, message: str, kind: str = "invalid_request_error") -> dict[str, Any]:
    """An error body in the protocol's own shape."""
    if protocol == "anthropic-messages":
        return {"type": "error", "error": {"type": kind, "message": message}}
    return {"error": {"message": message, "type": kind, "param": None, "code": str(status)}}
