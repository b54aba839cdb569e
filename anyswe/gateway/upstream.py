"""Real model upstreams, reached through litellm (pinned), whatever protocol the agent speaks.

The gateway reads every agent request into its neutral form; this upstream sends that conversation
to the model's ``base_url`` in the model's own protocol (``api``): OpenAI chat completions directly
(openai_chat.py: the RL path's policy servers, with nothing in between), the others through litellm — which does the
OpenAI / Anthropic / Responses conversions, so a Claude Code agent can run on an OpenAI-protocol
model — and reads the reply back into the neutral form, which the gateway writes in the agent's
protocol. The spec's ``params`` win over what the agent sent. Transient upstream errors (429, 5xx,
connection) are retried by litellm with backoff, a bounded number of times; the rest reach the agent
as an error in its protocol's shape. The key is read from the spec's environment variable here, in
the gateway's process, and goes nowhere else.
"""

from __future__ import annotations

import json
import os
from typing import Any

from anyswe.gateway.errors import UpstreamError
from anyswe.gateway.protocols import wire_protocol
from anyswe.gateway.wire import Conversation, Reply, ToolCall, Usage, tool_args
from anyswe.model import ModelSpec

#: litellm's model prefix for each upstream protocol.
_STOP = {"tool_calls": "tool_use", "length": "max_tokens"}
#: Attempts litellm makes for a transient error before the agent gets it.
RETRIES = 3


def _openai_messages(conv: Conversation) -> list[dict[str, Any]]:
    """The conversation as OpenAI chat messages: litellm's common input."""
    out: list[dict[str, Any]] = []
    for m in conv.messages:
        if m.role == "tool":
            out.append({"role": "tool", "tool_call_id": m.tool_call_id or "", "content": m.text})
            continue
        msg: dict[str, Any] = {"role": m.role, "content": m.text or None}
        if m.tool_calls:
            msg["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
                for c in m.tool_calls
            ]
        out.append(msg)
    return out


def _tools(conv: Conversation) -> list[dict[str, Any]] | None:
    tools = []
    for name, schema in conv.tools.items():
        function = {"name": name, "parameters": schema or {"type": "object"}}
        if name in conv.tool_descriptions:  # what the tool does: the model needs it as much as the schema
            function["description"] = conv.tool_descriptions[name]
        tools.append({"type": "function", "function": function})
    return tools or None


def _reply(response: Any) -> Reply:
    choice = response.choices[0]
    message = choice.message
    calls = [ToolCall(c.id, c.function.name, tool_args(c.function.arguments)) for c in (message.tool_calls or [])]
    usage = getattr(response, "usage", None)
    details = getattr(usage, "prompt_tokens_details", None)
    reasoning = getattr(message, "reasoning_content", None)  # litellm's name for any provider's reasoning
    return Reply(
        text=message.content or "",
        reasoning=str(reasoning) if reasoning else None,
        tool_calls=calls,
        usage=Usage(
            input_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
            output_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
            cache_read_tokens=int(getattr(details, "cached_tokens", 0) or 0),
        ),
        stop=_STOP.get(choice.finish_reason or "", "tool_use" if calls else "end"),  # type: ignore[arg-type]
    )


class HttpUpstream:
    """One model's upstream: its protocol, URL, params and key (from its environment variable)."""

    def __init__(self, spec: ModelSpec) -> None:
        if spec.api == "scripted":
            raise ValueError("a scripted model has no HTTP upstream")
        self.spec = spec
        self._key = os.environ.get(spec.api_key_env) if spec.api_key_env else None

    async def reply(self, conv: Conversation) -> Reply:
        base = self.spec.endpoint_url()
        # The OpenAI protocols at a given URL (policy servers, vLLM, Gym's model server) are spoken
        # directly: no litellm in the path (without a URL litellm knows the provider's default).
        if self.spec.api in ("openai-chat", "openai-responses") and base:
            return await self._direct(base.rstrip("/"), conv)
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        import litellm

        litellm.suppress_debug_info = True
        kwargs: dict[str, Any] = {
            "model": wire_protocol(self.spec.api).litellm_prefix + self.spec.model,
            "messages": _openai_messages(conv),
            "api_base": self.spec.endpoint_url(),
            "api_key": self._key or "none",
            "num_retries": RETRIES,
            **self.spec.params,  # the spec's sampling parameters win over the agent's
        }
        if (tools := _tools(conv)) is not None:
            kwargs["tools"] = tools
        try:
            return _reply(await litellm.acompletion(**kwargs))
        except Exception as exc:  # litellm's errors carry the upstream's status
            raise self._error(exc) from None

    async def _direct(self, base: str, conv: Conversation) -> Reply:
        headers = {"Authorization": f"Bearer {self._key}"} if self._key else {}
        try:
            if self.spec.api == "openai-chat":
                from anyswe.gateway import openai_chat

                same = conv.protocol == "openai-chat" and conv.body is not None  # sent as written: no translation
                messages, tools = ([], None) if same else (_openai_messages(conv), _tools(conv))
                body = openai_chat.request_body(self.spec, conv, messages, tools)
                return await openai_chat.post_chat(base + "/chat/completions", body, headers, self.spec.model)
            from anyswe.gateway import openai_responses

            body = openai_responses.request_body(self.spec, conv)
            return await openai_responses.post_responses(base + "/responses", body, headers, self.spec.model)
        except UpstreamError as exc:
            if self._key:
                exc.args = (str(exc).replace(self._key, "[key]"),)
            raise

    def _error(self, exc: Exception) -> UpstreamError:
        status = int(getattr(exc, "status_code", 502) or 502)
        message = str(getattr(exc, "message", exc))
        if self._key:
            message = message.replace(self._key, "[key]")
        if "ContextWindow" in type(exc).__name__:
            return UpstreamError(400, message, kind="invalid_request_error", code="context_length_exceeded")
        kind = {401: "authentication_error", 403: "permission_error", 429: "rate_limit_error"}.get(status, "api_error")
        return UpstreamError(
            status, f"upstream {self.spec.model}: {message}", kind=kind, unreachable=_cannot_connect(exc)
        )


def _cannot_connect(exc: BaseException) -> bool:
    """Whether litellm's error comes from no connection at all. It wraps one in an InternalServerError
    or an APIConnectionError (and the latter also wraps its own failures), so its cause says, not its class."""
    import httpx

    link: BaseException | None = exc
    for _ in range(10):
        if link is None:
            return False
        if isinstance(link, httpx.ConnectError | ConnectionRefusedError):
            return True
        link = link.__cause__ or link.__context__
    return False
