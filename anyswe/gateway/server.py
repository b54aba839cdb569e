"""The model gateway: one HTTP server on the host between every agent and every model.

Agents speak Anthropic Messages (``POST /v1/messages``), OpenAI Chat Completions
(``POST /v1/chat/completions``), OpenAI Responses (``POST /v1/responses``) or Google's
``generateContent`` (``POST /v1beta/models/<model>:generateContent``, ``:streamGenerateContent``),
streamed or not, and list models with ``GET /v1/models``. Each task is granted its own token
(``x-api-key``, ``x-goog-api-key`` or ``Authorization: Bearer``, or a ``/t/<token>`` path prefix);
the gateway maps it to the task and its model, refuses unknown or revoked tokens, records every
call into the task's trajectory, counts its usage and enforces its budget. Upstream keys never leave this process.

It listens on loopback TCP (host-side agents), on a unix socket (for sandboxes with the ``gateway``
network, where anyswe's helper relays ``127.0.0.1:<port>`` inside to it), and, when units run on
other machines, on this machine's address in their cluster, where their nodes' relays connect
(``gateway/relay.py``). It speaks plain HTTP; per-task tokens are its only credential.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import secrets
import tempfile
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from anyswe.gateway._json import loads_request
from anyswe.gateway.errors import UpstreamError, UpstreamRefused
from anyswe.gateway.grants import Budget, Grant, Limits
from anyswe.gateway.protocols import match_path, routes
from anyswe.gateway.render import render_error, render_json, render_stream
from anyswe.gateway.trajectory import Answered, Refused, flush
from anyswe.gateway.wire import (
    Conversation,
    Reply,
    WireError,
    read_request,
)
from anyswe.gateway.wire import (
    Protocol as Wire,
)

if TYPE_CHECKING:
    from aiohttp import web

    from anyswe.model import PriceSpec


class Upstream(Protocol):
    """Turns a conversation into a reply (the scripted model; upstream clients)."""

    def reply(self, conv: Conversation) -> Reply | Awaitable[Reply]: ...


def _protocol_for(path: str, routes: dict[str, Wire]) -> Wire:
    """The protocol an error on an unknown ``path`` is written in: the one whose route's last part the
    path has (``/v1/messages/count_tokens`` is an Anthropic client's), else OpenAI chat's shape."""
    parts = path.split("/")
    for route, protocol in routes.items():
        if route.rsplit("/", 1)[-1] in parts:
            return protocol
    return "openai-chat"


class Gateway:
    """``async with Gateway() as gw:`` — grant tokens per task, point agents at ``gw.url_for(...)``."""

    def __init__(self, *, socket_dir: Path | None = None, limits: Limits | None = None) -> None:
        self.limits = limits or Limits()
        #: Request path -> protocol, every registered protocol's (gateway/protocols.py).
        self._routes = routes()
        self._grants: dict[str, Grant] = {}
        self._runner: web.ServerRunner | None = None
        self._socket_dir = socket_dir
        self.ports: dict[str, int] = {}
        self.socket: Path | None = None
        #: Per-task sockets: path -> (the one token served there, its listening server).
        self._task_sockets: dict[str, tuple[str, asyncio.Server]] = {}
        #: The address other machines reach this gateway at (through relays), when units run there.
        self.relay_host: str | None = None

    # -- tokens -----------------------------------------------------------------------------------

    def grant(
        self,
        key: str,
        model: str,
        upstream: Upstream,
        *,
        trajectory: Path | None = None,
        budget: Budget | None = None,
        token: str | None = None,
        prices: PriceSpec | None = None,
    ) -> str:
        """A new token for task ``key`` on ``model`` (or the given one): the only credential the agent gets."""
        token = token or f"anyswe-{secrets.token_urlsafe(24)}"
        grant = Grant(
            key,
            model,
            upstream,
            trajectory,
            budget or Budget(),
            record_cap=self.limits.task_bytes,
            call_cap=self.limits.task_calls,
            prices=prices,
        )
        self._grants[token] = grant
        return token

    def revoke(self, token: str) -> Grant:
        """End a task's access (and remove its socket, if it has one); its usage stays readable."""
        grant = self._grants[token]
        grant.active = False
        flush(grant)  # every answered call's step is in the file before the task reads it
        if grant.trajectory_file is not None:
            grant.trajectory_file.close()
            grant.trajectory_file = None
        grant.chat_read = grant.last_digest = None  # the last call's history, kept for the next call: there is none
        for path, (owner, _) in list(self._task_sockets.items()):
            if owner == token:
                self._close_socket(path)
        return grant

    async def open_socket(self, token: str) -> Path:
        """A unix socket for this task alone, in a directory of its own (what its sandbox mounts, read-only).

        It listens until the token is revoked and serves that token only: no other task's sandbox
        sees it, and no other token is accepted on it.
        """
        if self._runner is None or self._socket_dir is None:
            raise RuntimeError("open_socket needs a started gateway with a socket_dir")
        where = Path(tempfile.mkdtemp(prefix="t-", dir=self._socket_dir))
        path = where / "gateway.sock"
        try:
            server = await asyncio.get_running_loop().create_unix_server(self._runner.server, str(path))  # type: ignore[arg-type]
        except BaseException:
            where.rmdir()
            raise
        self._task_sockets[str(path)] = (token, server)
        return path

    def _close_socket(self, path: str) -> None:
        _, server = self._task_sockets.pop(path)
        server.close()  # no new connections; those open finish (their token is no longer granted)
        with contextlib.suppress(OSError):
            Path(path).unlink(missing_ok=True)
            Path(path).parent.rmdir()

    def _grant_for(self, request: web.BaseRequest, token: str) -> Grant | None:
        """The grant of the token in the path (``token``), the ``x-api-key`` (``x-goog-api-key``) header or
        a bearer one."""
        token = token or request.headers.get("x-api-key") or request.headers.get("x-goog-api-key") or ""
        auth = request.headers.get("Authorization", "")
        if not token and auth.lower().startswith("bearer "):
            token = auth[7:].strip()
        transport = request.transport
        sockname = transport.get_extra_info("sockname") if transport is not None else None
        owner = self._task_sockets.get(sockname) if isinstance(sockname, str) else None
        if owner is not None and owner[0] != token:
            return None  # a task's own socket serves its own token only
        grant = self._grants.get(token)
        return grant if grant is not None and grant.active else None

    # -- serving ----------------------------------------------------------------------------------

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        """Every request: ``[/t/<token>]/v1/<route>``. aiohttp's low-level server with this dispatch, not
        its Application and router: the call's path is the gateway's latency, and the router's
        resolution and request object were a tenth of a pass-through's CPU (bench/gateway_latency.py)."""
        path, token = request.path, ""
        if path.startswith("/t/"):
            token, _, rest = path[3:].partition("/")
            path = "/" + rest if token else path
        protocol, fields = self._routes.get(path), None
        if protocol is None and request.method == "POST" and (found := match_path(path)) is not None:
            protocol, fields = found  # Gemini's: the model (and streaming) named in the path
        if protocol is not None and request.method == "POST":
            return await self._call(request, protocol, token, fields)
        if path == "/v1/models" and request.method in ("GET", "HEAD"):
            return self._models(request, token)
        return self._error(
            _protocol_for(request.path, self._routes),
            404,
            f"anyswe gateway: no route {request.method} {request.path}",
            "not_found_error",
        )

    def _request(self, message: Any, payload: Any, protocol: Any, writer: Any, task: Any) -> web.BaseRequest:
        from aiohttp import web

        loop = asyncio.get_running_loop()
        return web.BaseRequest(
            message, payload, protocol, writer, task, loop, client_max_size=self.limits.request_bytes
        )

    async def start(self, hosts: tuple[str, ...] = ("127.0.0.1",), *, port: int = 0) -> None:
        """Listen on ``port`` (0: a free one) on each of ``hosts`` (one port for all) and on a unix socket."""
        from aiohttp import web

        # aiohttp's keep-alive timer runs from a connection's start and from each reply until the next
        # request's headers are in: it is the header read timeout (and closes idle connections). A refused
        # body is drained for a short while only (lingering), so its client can read the refusal.
        # An agent that goes away mid-call (stopped at its deadline, its sandbox removed) cancels its
        # upstream call: no model keeps generating for nobody, and its reservation is given back. On
        # close, calls still in flight are cancelled at once (aiohttp's default waits 60 s for them: a
        # run whose last task had a slow call ended a minute late).
        server = web.Server(
            self._handle,
            request_factory=self._request,
            handler_cancellation=True,
            access_log=None,
            keepalive_timeout=self.limits.header_seconds,
            lingering_time=2.0,
        )
        self._runner = web.ServerRunner(server, shutdown_timeout=1.0)
        await self._runner.setup()
        for host in hosts:
            site = web.TCPSite(self._runner, host, port)
            await site.start()
            port = port or site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            self.ports[host] = port
        if self._socket_dir is not None:
            self._socket_dir.mkdir(parents=True, exist_ok=True)
            self.socket = self._socket_dir / "gateway.sock"
            await web.UnixSite(self._runner, str(self.socket)).start()

    async def close(self) -> None:
        from anyswe.gateway.openai_chat import close_sessions

        await close_sessions()  # the direct upstream's pooled connections
        for token, grant in self._grants.items():
            if grant.active:
                self.revoke(token)
        for path in list(self._task_sockets):
            self._close_socket(path)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self.socket is not None:
            self.socket.unlink(missing_ok=True)

    async def __aenter__(self) -> Gateway:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.shield(self.close())

    def url(self, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.ports[host]}"

    # -- handlers ---------------------------------------------------------------------------------

    def _error(self, protocol: Wire, status: int, message: str, kind: str) -> web.Response:
        from aiohttp import web

        return web.json_response(render_error(protocol, status, message, kind), status=status)

    def _upstream_error(self, protocol: Wire, exc: UpstreamError) -> web.Response:
        from aiohttp import web

        # The protocol's own class places the upstream's code (a plugin protocol's body need not be OpenAI's).
        body = render_error(protocol, exc.status, str(exc), exc.kind, exc.code)
        headers = {"Retry-After": f"{exc.retry_after:g}"} if exc.retry_after is not None else None
        return web.json_response(body, status=exc.status, headers=headers)

    def _models(self, request: web.BaseRequest, token: str) -> web.Response:
        from aiohttp import web

        grant = self._grant_for(request, token)
        protocol = _protocol_for(request.path, self._routes)
        if grant is None:
            return self._error(protocol, 401, "invalid or expired task token", "authentication_error")
        model = {
            "id": grant.model,
            "object": "model",
            "type": "model",
            "created": 0,
            "owned_by": "anyswe",
            "display_name": grant.model,
        }
        return web.json_response({"object": "list", "data": [model], "has_more": False})

    async def _call(
        self, request: web.BaseRequest, protocol: Wire, token: str, fields: dict[str, Any] | None = None
    ) -> web.StreamResponse:
        grant = self._grant_for(request, token)
        if grant is None:
            return self._error(protocol, 401, "invalid or expired task token", "authentication_error")
        if grant.down is not None:
            return self._error(protocol, 401, f"anyswe: {grant.down}", "authentication_error")
        raw = await self._read(request, protocol)
        if not isinstance(raw, bytes):
            return raw
        prior = grant.chat_read
        try:
            body = loads_request(raw)
            if fields and isinstance(body, dict):
                body = {**body, **fields}
            conv = read_request(protocol, body, known=prior[1:] if prior is not None else None)
        except (WireError, ValueError, TypeError, RecursionError) as exc:  # what the agent sent: its 400
            return self._error(protocol, 400, str(exc)[:500], "invalid_request_error")
        grant.reads += 1
        seq = grant.reads
        if protocol == "openai-chat" and isinstance(sent := body.get("messages"), list):
            grant.chat_read = (seq, sent, conv.messages)  # the next call repeats this history: read once
        held = grant.admit(body, len(raw))
        if isinstance(held, str):
            if held.startswith("recorded bytes") and not grant.cap_noted:  # once: the cap bounds the file too
                grant.cap_noted = True
                grant.unwritten.append(Refused(held, len(raw), time.time()))
                flush(grant)
            # The token stops granting calls: a 401, which no client retries (a 429 or 5xx would be
            # retried and the agent would spin; litellm turns a 403 into a retried APIError).
            return self._error(protocol, 401, f"anyswe budget exhausted: {held}", "authentication_error")
        start = time.monotonic()
        try:
            result = grant.upstream.reply(conv)
            reply = await result if inspect.isawaitable(result) else result
        except BaseException as exc:
            grant.release(held)
            if isinstance(exc, UpstreamRefused):
                grant.failed = grant.failed or str(exc)
                # As for a budget: a 401, which no client retries.
                return self._error(protocol, 401, f"anyswe: {exc}", "authentication_error")
            if isinstance(exc, UpstreamError):
                if grant.failed_call(exc):  # no server there: as for a budget, a 401 ends the agent
                    return self._error(protocol, 401, f"anyswe: {grant.down}", "authentication_error")
                return self._upstream_error(protocol, exc)
            raise
        latency = time.monotonic() - start
        grant.settle(held, reply.usage)  # usage and budget before the answer: the next call is held to them
        continues = prior[0] if prior is not None and conv.reused else None
        grant.unwritten.append(Answered(protocol, body, conv, reply, latency, time.time(), seq, continues))
        try:
            if not conv.stream:
                return await self._respond_json(request, protocol, reply, conv)
            return await self._respond_stream(request, protocol, reply, conv)
        finally:
            # The step is made and written once the agent has its answer (off the call's path), and
            # whatever becomes of the answer (an agent gone mid-answer cancels this handler). Steps are
            # written in the order calls were answered; revoke writes any still waiting.
            flush(grant)

    async def _read(self, request: web.BaseRequest, protocol: Wire) -> bytes | web.Response:
        """The request's body, or the error that refuses it (too large: 413; too slow: 408)."""
        from aiohttp import web

        too_large = f"anyswe gateway: request bodies are limited to {self.limits.request_bytes} bytes"
        if (request.content_length or 0) > self.limits.request_bytes:
            return self._close(self._error(protocol, 413, too_large, "request_too_large"))
        try:
            async with asyncio.timeout(self.limits.body_seconds):
                return await request.read()
        except web.HTTPRequestEntityTooLarge:
            return self._close(self._error(protocol, 413, too_large, "request_too_large"))
        except TimeoutError:
            message = f"anyswe gateway: the request body took over {self.limits.body_seconds:g}s"
            return self._close(self._error(protocol, 408, message, "timeout_error"))

    @staticmethod
    def _close(response: web.Response) -> web.Response:
        """The response, and the connection closed after it (its unread body is not waited for)."""
        response.force_close()
        return response

    async def _respond_json(
        self, request: web.BaseRequest, protocol: Wire, reply: Reply, conv: Conversation
    ) -> web.Response:
        """The answer, written before the handler returns (so what follows it is off the call's path)."""
        from aiohttp import web

        from anyswe.gateway._json import dumps

        body = dumps(render_json(protocol, reply, conv.model))
        response = web.Response(body=body, content_type="application/json")
        await response.prepare(request)
        await response.write_eof()
        return response

    async def _respond_stream(
        self, request: web.BaseRequest, protocol: Wire, reply: Reply, conv: Conversation
    ) -> web.StreamResponse:
        from aiohttp import web

        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        for event in render_stream(protocol, reply, conv.model, include_usage=conv.include_usage):
            await response.write(event)
        await response.write_eof()
        return response
