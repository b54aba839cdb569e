"""The three model protocols on the wire, read into one neutral form (replies are written back in
render.py).

Anthropic Messages, OpenAI Chat Completions and OpenAI Responses requests. The neutral form is what
anyswe itself needs of a call: the conversation (for the scripted model, the trajectory and an
upstream in another protocol) and the reply (text, reasoning, tool calls, usage, why it stopped).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Literal

#: A wire protocol's registered name (gateway/protocols.py): anthropic-messages, openai-chat,
#: openai-responses, or a plugin's.
Protocol = str
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
    #: name -> what the agent told the model its tool does (the model needs it as much as the schema).
    tool_descriptions: dict[str, str] = field(default_factory=dict)
    #: The protocol the agent spoke and its body as sent: an upstream of the same protocol gets the
    #: agent's own messages and tools, untouched (a policy's prompt tokens are then the agent's).
    protocol: Protocol | None = None
    body: dict[str, Any] | None = None
    #: How many leading messages were taken from a known reading (read_request's ``known``), not read
    #: again: the body repeats exactly that call's messages as sent, then adds its own.
    reused: int = 0


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
    tokens: dict[str, list[Any]] | None = None  #: the policy's token ids/log-probs (Gym's names), if given
    #: What the model reasoned before it answered, where its protocol returns it (a thinking block,
    #: ``reasoning_content``, a Responses reasoning item's summary).
    reasoning: str | None = None


class WireError(ValueError):
    """A request body that is not what its protocol says."""


def conversation_hash(messages: list[Message]) -> str:
    """A digest of what was said (roles, texts, tool calls and results), whatever the protocol or call ids."""
    return conversation_hashes(messages)[1]


def conversation_hashes(messages: list[Message], prefix: int | None = None) -> tuple[str | None, str]:
    """:func:`conversation_hash` of the first ``prefix`` messages (None if there are fewer) and of all,
    in one pass."""
    digest, at = Digest(), None
    for n, m in enumerate(messages):
        if n == prefix:
            at = digest.hexdigest()
        digest.add([m])
    if prefix == len(messages):
        at = digest.hexdigest()
    return at, digest.hexdigest()


_SAID = json.JSONEncoder(sort_keys=True)


class Digest:
    """:func:`conversation_hash` as a conversation grows: SHA-256 of the JSON list of what each message
    said, fed item by item (json.dumps of a list is its items' encodings, ", "-joined in brackets), so
    a call that continues the previous one's history hashes only its new messages."""

    def __init__(self) -> None:
        self._sha = hashlib.sha256(b"[")
        self.count = 0

    def add(self, messages: list[Message]) -> None:
        for m in messages:
            said = _SAID.encode((m.role, m.text, [(c.name, c.arguments) for c in m.tool_calls]))
            self._sha.update(((", " if self.count else "") + said).encode())
            self.count += 1

    def copy(self) -> Digest:
        twin = Digest()
        twin._sha, twin.count = self._sha.copy(), self.count
        return twin

    def hexdigest(self) -> str:
        done = self._sha.copy()
        done.update(b"]")
        return str(done.hexdigest())


# -- reading requests ---------------------------------------------------------------------------


def _text(content: Any) -> str:
    """Text of a content field: a string, or a list of parts with ``text``."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return "" if content is None else str(content)


def tool_args(raw: Any) -> dict[str, Any]:  # JSON text or an object; bad JSON kept as text
    if isinstance(raw, dict):
        return raw
    try:
        parsed = json.loads(raw or "{}")
    except json.JSONDecodeError:
        return {"_unparsed": raw}
    return parsed if isinstance(parsed, dict) else {"_value": parsed}


def anthropic_messages(body: dict[str, Any]) -> list[Message]:
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
                msg.tool_calls.append(ToolCall(block["id"], block["name"], tool_args(block.get("input"))))
            elif kind == "tool_result":
                out.append(Message("tool", _text(block.get("content")), tool_call_id=block.get("tool_use_id")))
        if msg.text or msg.tool_calls:
            out.append(msg)
    return out


def chat_messages(body: dict[str, Any], known: Known | None = None) -> tuple[list[Message], int]:
    raw = body.get("messages") or []
    out: list[Message] = []
    if known is not None and 0 < len(known[0]) <= len(raw) and raw[: len(known[0])] == known[0]:
        # The same messages as sent read to the same Messages (each is read on its own): the known
        # ones are reused, the new ones read. Reading a whole history on every call grew with its square.
        out, raw = list(known[1]), raw[len(known[0]) :]
    reused = len(out)
    for m in raw:
        role = "system" if m.get("role") == "developer" else m.get("role", "user")
        calls = [
            ToolCall(c["id"], c["function"]["name"], tool_args(c["function"].get("arguments")))
            for c in m.get("tool_calls") or []
        ]
        out.append(Message(role, _text(m.get("content")), calls, m.get("tool_call_id")))
    return out, reused


def responses_messages(body: dict[str, Any]) -> list[Message]:
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
            call = ToolCall(item.get("call_id") or item.get("id", ""), item["name"], tool_args(item.get("arguments")))
            if out and out[-1].role == "assistant" and not out[-1].text:
                out[-1].tool_calls.append(call)
            else:
                out.append(Message("assistant", tool_calls=[call]))
        elif kind == "function_call_output":
            out.append(Message("tool", _text(item.get("output")), tool_call_id=item.get("call_id")))
    return out


#: A chat completions history as sent (``messages``) and as read: what :func:`read_request` may reuse.
Known = tuple[list[Any], list[Message]]


def read_request(protocol: Protocol, body: Any, known: Known | None = None) -> Conversation:
    """The neutral form of a request body; :class:`WireError` when it is not one of ``protocol``.

    ``known``: a chat completions history read before (the same task's previous call). When the body's
    messages begin with it, those are not read again: the result is the same as a full reading."""
    from anyswe.gateway.protocols import wire_protocol

    wire = wire_protocol(protocol)
    if not isinstance(body, dict) or not isinstance(body.get("model"), str):
        raise WireError("the request body must be a JSON object with a `model`")
    try:
        messages, reused = wire.messages(body, known)
        tools, descriptions = {}, {}
        for entry in wire.entries(body):
            found = wire.tool(entry)
            if found is None:  # not a function tool (a server tool, a web search): nothing to offer
                continue
            tool, schema = found
            tools[tool["name"]] = schema or {}
            if tool.get("description"):
                descriptions[tool["name"]] = str(tool["description"])
    except (KeyError, TypeError, AttributeError) as exc:
        raise WireError(f"malformed {protocol} request: {type(exc).__name__} {exc}") from None
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    return Conversation(
        body["model"], messages, tools, bool(body.get("stream")), include_usage, descriptions, protocol, body, reused
    )
