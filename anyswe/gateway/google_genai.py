"""Google's ``generateContent`` protocol (the Gemini API), ``google-generate-content``: what Gemini CLI
and Google's genai SDKs speak.

A request is ``POST /v1beta/models/<model>:generateContent`` (one JSON reply) or
``:streamGenerateContent?alt=sse`` (server-sent events, each a partial ``GenerateContentResponse``):
the model and whether to stream are in the path, not the body, so the protocol reads them from there
(:meth:`GoogleGenerateContent.read_path`). The key comes in ``x-goog-api-key``. The body's
``contents`` alternate ``user`` and ``model`` turns of ``parts``: text, ``functionCall`` (the model's
tool calls) and ``functionResponse`` (their results, in a user turn); ``systemInstruction`` is the
system prompt and ``tools`` hold ``functionDeclarations``. Replies carry ``candidates[0].content``
and ``usageMetadata``; a thought is a text part marked ``thought``. Errors are Google's
``{"error": {"code", "message", "status"}}``. litellm reaches an upstream that speaks it as
``gemini/<model>`` at ``<base_url>/models/<model>:generateContent`` (base URLs end in ``/v1beta``).

Gemini's calls may come without ids (the API gives none; clients match results by name): a call
without one is given its function's name as id, and so is a result without one, so that a
translation to a protocol that pairs them by id still pairs them.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from typing import Any, ClassVar

from anyswe.gateway.protocols import WireProtocol
from anyswe.gateway.wire import Known, Message, Reply, ToolCall, Usage

_PATH = re.compile(r"^/v1(?:beta|alpha)?/models/(?P<model>[^/:]+):(?P<method>generateContent|streamGenerateContent)$")
_FINISH = {"end": "STOP", "tool_use": "STOP", "max_tokens": "MAX_TOKENS"}
#: HTTP status -> Google's status name (google.rpc.Code), which its SDKs show.
_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    408: "DEADLINE_EXCEEDED",
    413: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def _get(obj: dict[str, Any], name: str) -> Any:
    """Field ``name`` (lowerCamelCase) of a request object, or its snake_case spelling: the API takes
    both (proto3's JSON mapping), Google's SDKs send the first, litellm the second."""
    if name in obj:
        return obj[name]
    return obj.get(re.sub(r"([A-Z])", lambda m: "_" + m[1].lower(), name))


def _text(parts: Any) -> str:
    """The text of a ``parts`` list (thoughts left out), or of a plain string."""
    if isinstance(parts, str):
        return parts
    return "".join(p.get("text", "") for p in parts or [] if isinstance(p, dict) and not p.get("thought"))


def _lower_types(schema: Any) -> Any:
    """A Gemini ``parameters`` schema (OpenAPI's subset, types in capitals: ``OBJECT``) as JSON Schema."""
    if isinstance(schema, dict):
        return {k: (v.lower() if k == "type" and isinstance(v, str) else _lower_types(v)) for k, v in schema.items()}
    if isinstance(schema, list):
        return [_lower_types(v) for v in schema]
    return schema


def messages(body: dict[str, Any]) -> list[Message]:
    """A ``generateContent`` body's conversation in the neutral form."""
    system = _get(body, "systemInstruction")
    out = []
    if system:
        out.append(Message("system", _text(system.get("parts") if isinstance(system, dict) else system)))
    for content in body.get("contents") or []:
        parts = content.get("parts") or []
        if content.get("role") == "model":
            calls = [_get(p, "functionCall") for p in parts if isinstance(p, dict) and _get(p, "functionCall")]
            tool_calls = [ToolCall(c.get("id") or c["name"], c["name"], dict(c.get("args") or {})) for c in calls]
            out.append(Message("assistant", _text(parts), tool_calls))
            continue
        results = [_get(p, "functionResponse") for p in parts if isinstance(p, dict)]
        for r in filter(None, results):
            out.append(Message("tool", json.dumps(r.get("response") or {}), tool_call_id=r.get("id") or r["name"]))
        if text := _text([p for p in parts if isinstance(p, dict) and not _get(p, "functionResponse")]):
            out.append(Message("user", text))
    return out


def _parts(reply: Reply) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = [{"text": reply.reasoning, "thought": True}] if reply.reasoning else []
    if reply.text:
        parts.append({"text": reply.text})
    parts += [{"functionCall": {"id": c.id, "name": c.name, "args": c.arguments}} for c in reply.tool_calls]
    return parts


def _usage(u: Usage) -> dict[str, int]:
    return {
        "promptTokenCount": u.input_tokens,
        "candidatesTokenCount": u.output_tokens,
        "totalTokenCount": u.input_tokens + u.output_tokens,
        "cachedContentTokenCount": u.cache_read_tokens,
    }


def _response(parts: list[dict[str, Any]], model: str, resp_id: str, reply: Reply | None) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    out: dict[str, Any] = {"candidates": [candidate], "modelVersion": model, "responseId": resp_id}
    if reply is not None:  # the last (or only) response: why it stopped, and the call's usage
        candidate["finishReason"] = _FINISH[reply.stop]
        out["usageMetadata"] = _usage(reply.usage)
    return out


class GoogleGenerateContent(WireProtocol):
    name: ClassVar[str] = "google-generate-content"
    paths: ClassVar[tuple[str, ...]] = ()  # the model is in the path: read_path matches it
    litellm_prefix: ClassVar[str] = "gemini/"

    def read_path(self, path: str) -> dict[str, Any] | None:
        match = _PATH.match(path)
        if match is None:
            return None
        return {"model": match["model"], "stream": match["method"] == "streamGenerateContent"}

    def messages(self, body: dict[str, Any], known: Known | None) -> tuple[list[Message], int]:
        return messages(body), 0

    def entries(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        # One tools entry holds many functions.
        return [d for t in body.get("tools") or [] for d in (_get(t, "functionDeclarations") or [])]

    def tool(self, entry: dict[str, Any]) -> tuple[dict[str, Any], Any] | None:
        if "name" not in entry:
            return None
        return entry, _get(entry, "parametersJsonSchema") or _lower_types(entry.get("parameters"))

    def render_json(self, reply: Reply, model: str) -> dict[str, Any]:
        return _response(_parts(reply), model, uuid.uuid4().hex[:24], reply)

    def render_stream(self, reply: Reply, model: str, include_usage: bool) -> Iterator[bytes]:
        resp_id = uuid.uuid4().hex[:24]
        parts = _parts(reply)
        # Text streams in pieces; the tool calls and the finish reason come whole in the last event.
        texts = [p for p in parts if "functionCall" not in p]
        calls = [p for p in parts if "functionCall" in p]
        events = [_response([part], model, resp_id, None) for part in texts[:-1]]
        events.append(_response(texts[-1:] + calls, model, resp_id, reply))
        for event in events:
            yield f"data: {json.dumps(event)}\r\n\r\n".encode()

    def render_error(self, status: int, message: str, kind: str, code: str | None = None) -> dict[str, Any]:
        return {"error": {"code": status, "message": message, "status": _STATUS.get(status, "INTERNAL")}}
