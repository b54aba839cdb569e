"""An OpenAI chat completions upstream reached directly (gateway/http1.py), without litellm.

The RL path's upstream is an OpenAI-compatible policy server (vLLM, a Gym model server): there the
gateway must add next to nothing per call, and litellm's per-call work (tens of ms of CPU, measured
in bench/gateway_latency.py) would dominate. Chat completions is a protocol the gateway already
speaks both ways, so this upstream builds the request body itself (the conversation as OpenAI
messages, the spec's params over the agent's), posts it over keep-alive connections pooled per event
loop (http1.py), and reads the reply, its usage and (``token_ids``) vLLM's token ids and log-probs. Transient
failures (connection errors, 429, 5xx) are tried again with backoff, as litellm would; what stays
failed reaches the agent as an :class:`UpstreamError`. Other protocols keep litellm (upstream.py).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from anyswe.gateway._json import dumps, loads
from anyswe.gateway.errors import UpstreamError
from anyswe.gateway.wire import Conversation, Reply, ToolCall, Usage, tool_args

if TYPE_CHECKING:
    from anyswe.model import ModelSpec

_STOP = {"tool_calls": "tool_use", "length": "max_tokens", "function_call": "tool_use"}
#: Attempts for a transient failure, and the first backoff (doubling), as litellm's retries.
ATTEMPTS = 4
BACKOFF = 0.5
#: One call may take this long (a long generation of a big model on a loaded server).
TIMEOUT = 600.0

_JSON = {"Content-Type": "application/json", "User-Agent": "anyswe-gateway"}


async def close_sessions() -> None:
    """Close this loop's upstream connections (the gateway's close does, so none outlives it)."""
    from anyswe.gateway.http1 import close_clients

    close_clients()


def request_body(spec: ModelSpec, conv: Conversation, messages: list[dict[str, Any]], tools: Any) -> dict[str, Any]:
    """The chat completion to ask for. An agent that speaks chat completions itself has its messages
    and tools sent as it wrote them (``messages`` and ``tools`` are the translation of another
    protocol's): fields the neutral form has no place for (reasoning, content parts, names) reach
    the model, and a policy's prompt is what the agent meant. The spec's params, never the agent's."""
    if conv.protocol == "openai-chat" and conv.body is not None:
        messages, tools = conv.body.get("messages") or [], conv.body.get("tools") or None
    body: dict[str, Any] = {"model": spec.model, "messages": messages, **spec.params}
    if tools is not None:
        body["tools"] = tools
    if spec.token_ids:  # vLLM's OpenAI server: the ids of the prompt and of each generated token
        body.update(logprobs=True, return_token_ids=True, return_tokens_as_token_ids=True)
    return body


def read_reply(data: dict[str, Any]) -> Reply:
    """A chat completion (JSON) as the gateway's neutral reply, with vLLM's tokens if it has them."""
    try:
        choice = data["choices"][0]
        message = choice.get("message") or {}
    except (KeyError, IndexError, TypeError):
        raise UpstreamError(502, f"the upstream's reply has no choices: {str(data)[:300]}") from None
    calls = [
        ToolCall(c.get("id") or "", c["function"]["name"], tool_args(c["function"].get("arguments")))
        for c in message.get("tool_calls") or []
    ]
    usage = data.get("usage") or {}
    details = usage.get("prompt_tokens_details") or {}
    reasoning = message.get("reasoning_content") or message.get("reasoning")  # vLLM's, DeepSeek's, OpenRouter's
    return Reply(
        text=message.get("content") or "",
        reasoning=str(reasoning) if reasoning else None,
        tool_calls=calls,
        usage=Usage(
            input_tokens=int(usage.get("prompt_tokens") or 0),
            output_tokens=int(usage.get("completion_tokens") or 0),
            cache_read_tokens=int(details.get("cached_tokens") or 0),
        ),
        stop=_STOP.get(choice.get("finish_reason") or "", "tool_use" if calls else "end"),  # type: ignore[arg-type]
        tokens=_tokens(data, choice),
    )


def _tokens(data: dict[str, Any], choice: dict[str, Any]) -> dict[str, list[Any]] | None:
    content = (choice.get("logprobs") or {}).get("content") or []
    generated = choice.get("token_ids")
    if generated is None and content and all(str(t.get("token", "")).startswith("token_id:") for t in content):
        generated = [int(str(t["token"]).removeprefix("token_id:")) for t in content]
    out: dict[str, list[Any]] = {}
    if data.get("prompt_token_ids") is not None:
        out["prompt_token_ids"] = [int(t) for t in data["prompt_token_ids"]]
    if generated is not None:
        out["generation_token_ids"] = [int(t) for t in generated]
    if content:
        out["generation_log_probs"] = [float(t["logprob"]) for t in content]
    return out or None


def _failure(status: int, text: str, model: str) -> UpstreamError:
    try:
        err = json.loads(text).get("error") or {}
    except (json.JSONDecodeError, AttributeError):
        err = {}
    message = str(err.get("message") or text[:500]) if isinstance(err, dict) else text[:500]
    code = err.get("code") if isinstance(err, dict) else None
    if status == 400 and (code == "context_length_exceeded" or "maximum context length" in message):
        return UpstreamError(400, message, kind="invalid_request_error", code="context_length_exceeded")
    kind = {401: "authentication_error", 403: "permission_error", 429: "rate_limit_error"}.get(status, "api_error")
    if 400 <= status < 500 and status not in (401, 403, 429):
        kind = "invalid_request_error"
    return UpstreamError(status, f"upstream {model}: {status}: {message}", kind=kind)


async def post_chat(url: str, body: dict[str, Any], headers: dict[str, str], model: str) -> Reply:
    """POST a chat completion (:func:`post`, read by :func:`read_reply`)."""
    return await post(url, body, headers, model, read_reply)


async def post(
    url: str, body: dict[str, Any], headers: dict[str, str], model: str, read: Callable[[dict[str, Any]], Reply]
) -> Reply:
    """POST ``body``, trying a failure to connect, a 429 or a 5xx again with backoff; the reply
    ``read`` makes of the JSON answer, or an UpstreamError. A call that takes longer than
    :data:`TIMEOUT` is not tried again (another 10 minutes would not help): a 504 at once."""
    from anyswe.gateway.http1 import CannotConnect, ConnectionFailed, client

    data, sent = dumps(body), {**headers, **_JSON}
    last: UpstreamError | None = None
    for attempt in range(ATTEMPTS):
        if attempt:
            await asyncio.sleep(BACKOFF * 2 ** (attempt - 1))
        try:
            async with asyncio.timeout(TIMEOUT):
                status, raw = await client().post(url, data, sent)
        except TimeoutError:
            raise UpstreamError(504, f"upstream {model}: no answer from {url} within {TIMEOUT:g}s") from None
        except ConnectionFailed as exc:
            last = UpstreamError(
                502, f"upstream {model}: cannot reach {url}: {exc}", unreachable=isinstance(exc, CannotConnect)
            )
            continue
        if status == 200:
            try:
                data_in = loads(raw)
            except ValueError:
                text = raw[:300].decode("utf-8", "replace")
                raise UpstreamError(502, f"upstream {model}: a reply that is not JSON: {text}") from None
            return read(data_in)
        last = _failure(status, raw.decode("utf-8", "replace"), model)
        if status != 429 and status < 500:
            raise last
    assert last is not None
    raise last
