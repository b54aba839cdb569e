"""Wire protocols: how an agent speaks to a model, one class each, in one registry.

A protocol reads a request body into the neutral conversation (wire.py), writes a reply back as a
JSON body or as the server-sent events its official API sends (render.py), writes its errors, names
the paths the gateway serves it at, and says how litellm reaches an upstream that speaks it. The
gateway, the scripted model, the trajectory reader and the upstream clients ask this registry, never
a protocol's name; a package adds one through the ``anyswe.protocols`` entry point group.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import Any, ClassVar

from anyswe.errors import SpecError
from anyswe.gateway import render, wire
from anyswe.gateway.wire import Known, Message, Reply
from anyswe.registry import Registry


class WireProtocol(ABC):
    """One model protocol on the wire."""

    name: ClassVar[str]
    #: The request paths the gateway serves it at (after an optional ``/t/<token>`` prefix).
    paths: ClassVar[tuple[str, ...]]
    #: What litellm's model name starts with to reach an upstream that speaks this protocol.
    litellm_prefix: ClassVar[str]

    @abstractmethod
    def messages(self, body: dict[str, Any], known: Known | None) -> tuple[list[Message], int]:
        """The conversation of a request body, and how many leading messages came from ``known``."""

    def read_path(self, path: str) -> dict[str, Any] | None:
        """For a protocol that names the model (or streaming) in the request path, not the body: the
        body fields a ``path`` of it stands for (``model``, ``stream``); None for any other path."""
        return None

    def entries(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        """The request's tool entries, each read by :meth:`tool` (default: the body's ``tools``)."""
        return list(body.get("tools") or [])

    @abstractmethod
    def tool(self, entry: dict[str, Any]) -> tuple[dict[str, Any], Any] | None:
        """A function tool offered in the request (its entry with ``name``/``description``, and its
        input's JSON schema); None for an entry that is no function tool."""

    @abstractmethod
    def render_json(self, reply: Reply, model: str) -> dict[str, Any]:
        """The non-streaming response body."""

    @abstractmethod
    def render_stream(self, reply: Reply, model: str, include_usage: bool) -> Iterator[bytes]:
        """The server-sent events of a streamed reply."""

    def render_error(self, status: int, message: str, kind: str, code: str | None = None) -> dict[str, Any]:
        """An error body in the protocol's own shape (default: OpenAI's); ``code`` the upstream's, if any."""
        return render.openai_error(status, message, kind, code)


class AnthropicMessages(WireProtocol):
    name: ClassVar[str] = "anthropic-messages"
    paths: ClassVar[tuple[str, ...]] = ("/v1/messages",)
    litellm_prefix: ClassVar[str] = "anthropic/"

    def messages(self, body: dict[str, Any], known: Known | None) -> tuple[list[Message], int]:
        return wire.anthropic_messages(body), 0

    def tool(self, entry: dict[str, Any]) -> tuple[dict[str, Any], Any] | None:
        return (entry, entry.get("input_schema")) if "name" in entry else None

    def render_json(self, reply: Reply, model: str) -> dict[str, Any]:
        return render.anthropic_json(reply, model)

    def render_stream(self, reply: Reply, model: str, include_usage: bool) -> Iterator[bytes]:
        return render.anthropic_stream(reply, model)

    def render_error(self, status: int, message: str, kind: str, code: str | None = None) -> dict[str, Any]:
        # Anthropic's error object has no code field: the kind carries it.
        return {"type": "error", "error": {"type": kind, "message": message}}


class OpenAIChat(WireProtocol):
    name: ClassVar[str] = "openai-chat"
    paths: ClassVar[tuple[str, ...]] = ("/v1/chat/completions",)
    litellm_prefix: ClassVar[str] = "openai/"

    def messages(self, body: dict[str, Any], known: Known | None) -> tuple[list[Message], int]:
        return wire.chat_messages(body, known)

    def tool(self, entry: dict[str, Any]) -> tuple[dict[str, Any], Any] | None:
        if entry.get("type") != "function":
            return None
        return entry["function"], entry["function"].get("parameters")

    def render_json(self, reply: Reply, model: str) -> dict[str, Any]:
        return render.chat_json(reply, model)

    def render_stream(self, reply: Reply, model: str, include_usage: bool) -> Iterator[bytes]:
        return render.chat_stream(reply, model, include_usage)


class OpenAIResponses(WireProtocol):
    name: ClassVar[str] = "openai-responses"
    paths: ClassVar[tuple[str, ...]] = ("/v1/responses",)
    litellm_prefix: ClassVar[str] = "openai/responses/"

    def messages(self, body: dict[str, Any], known: Known | None) -> tuple[list[Message], int]:
        return wire.responses_messages(body), 0

    def tool(self, entry: dict[str, Any]) -> tuple[dict[str, Any], Any] | None:
        return (entry, entry.get("parameters")) if entry.get("type") == "function" else None

    def render_json(self, reply: Reply, model: str) -> dict[str, Any]:
        return render.responses_json(reply, model)

    def render_stream(self, reply: Reply, model: str, include_usage: bool) -> Iterator[bytes]:
        return render.responses_stream(reply, model)


PROTOCOLS: Registry[WireProtocol] = Registry("wire protocol", WireProtocol, group="anyswe.protocols")
for _cls in (OpenAIChat, OpenAIResponses, AnthropicMessages):
    PROTOCOLS.register(_cls.name, _cls)
PROTOCOLS.register("google-generate-content", "anyswe.gateway.google_genai:GoogleGenerateContent")

_instances: dict[str, WireProtocol] = {}


def wire_protocol(name: str) -> WireProtocol:
    """The protocol registered as ``name`` (a :class:`~anyswe.errors.SpecError` naming the known ones)."""
    if name not in _instances:
        _instances[name] = PROTOCOLS.load(name)()
    return _instances[name]


def known_protocol(name: str) -> str:
    """``name`` if a protocol is registered under it (a spec's ``api``, an agent's ``protocol``)."""
    wire_protocol(name)
    return name


def _loadable() -> list[tuple[str, WireProtocol]]:
    out = []
    for name in PROTOCOLS.names():
        try:
            out.append((name, wire_protocol(name)))
        except SpecError:  # a broken plugin serves nothing; the others still do
            continue
    return out


def routes() -> dict[str, str]:
    """Every fixed request path the gateway serves -> the protocol it is spoken in (built-ins and plugins)."""
    return {path: name for name, protocol in _loadable() for path in protocol.paths}


def match_path(path: str) -> tuple[str, dict[str, Any]] | None:
    """A path no fixed route has, read by the protocols that name the model in the path: the protocol,
    and the body fields the path stands for."""
    for name, protocol in _loadable():
        if (fields := protocol.read_path(path)) is not None:
            return name, fields
    return None
