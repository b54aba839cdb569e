"""The gateway's HTTP/1.1 client for its direct upstreams: one POST at a time per keep-alive connection,
pooled per origin and event loop, the response parsed by llhttp (httptools, Node's parser).

Why not aiohttp's client, which the gateway used before: on a call's path it cost about 0.5 ms of CPU
per call on the development machine (its request and response objects, cookie jar, tracing, timers),
a third of everything the gateway did per call and more than its whole latency target allows for
(bench/gateway_latency.py measures both). What the gateway asks of a client is small: POST a JSON
body with a few headers, read a JSON answer, reuse connections. That is this module; parsing the
answer, chunked bodies included, is llhttp's.

Semantics kept from the client it replaces: no proxies from the environment (aiohttp's default),
gzip and deflate answers decoded, TLS for ``https`` with the system's default context. A pooled
connection the server closed while idle (uvicorn closes them after 5 s) is found out on use and the
request sent once more on a new one, as it never reached the server; any other failure to connect,
a connection lost mid-answer or an answer llhttp cannot parse is a :class:`ConnectionFailed`, which
the caller may try again. A call cancelled (its agent went away) closes its connection: the server
sees the disconnect, and vLLM stops generating for nobody.
"""

from __future__ import annotations

import asyncio
import ssl
import time
import weakref
import zlib
from collections.abc import Mapping
from functools import lru_cache
from typing import NamedTuple
from urllib.parse import urlsplit

#: A pooled connection idle for longer than this is closed rather than used (servers' keep-alive
#: timeouts are shorter; an idle connection kept past them is only a connection to find dead).
IDLE_SECONDS = 60.0


class ConnectionFailed(OSError):
    """The request could not be sent, or no whole answer came back."""


class CannotConnect(ConnectionFailed):
    """No connection to the server at all (refused, no route, no such host): nothing was sent."""


class Answer(NamedTuple):
    status: int
    body: bytes


class _Origin(NamedTuple):
    scheme: str
    host: str
    port: int
    #: The Host header's value (the port only where it is not the scheme's own).
    authority: str


@lru_cache(maxsize=256)
def _split(url: str) -> tuple[_Origin, str]:
    """An absolute http(s) URL as its origin and its request target (path and query)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url!r}")
    default = 443 if parts.scheme == "https" else 80
    port = parts.port or default
    host = parts.hostname
    shown = f"[{host}]" if ":" in host else host
    authority = shown if port == default else f"{shown}:{port}"
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return _Origin(parts.scheme, host, port, authority), target


def _header_lines(headers: Mapping[str, str]) -> bytes:
    lines = []
    for name, value in headers.items():
        if any(c in name or c in value for c in "\r\n\0") or not name or ":" in name:
            raise ValueError(f"a header that cannot be sent: {name!r}")
        lines.append(f"{name}: {value}\r\n")
    return "".join(lines).encode("latin-1")


class _Connection(asyncio.Protocol):
    """One connection: it carries one request at a time and parses its answer as it arrives."""

    def __init__(self) -> None:
        import httptools

        self.transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._answer: asyncio.Future[Answer] | None = None
        self._body: list[bytes] = []
        self._encoding = b""
        self._header = b""
        self._headers_done = False
        self.reusable = False
        self.closed = False
        self.idle_since = time.monotonic()
        #: Whether any byte of the current request's answer came in (a request on a connection the
        #: server had already closed gets none: it may be sent again).
        self.answered = False

    # -- asyncio.Protocol ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        import httptools

        self.answered = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(ConnectionFailed(f"an answer that is not HTTP/1.1: {exc}"))

    def eof_received(self) -> bool | None:
        return None  # close the transport: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.reusable = False
        if self._answer is not None and not self._answer.done() and self._headers_done and not self._framed():
            self._complete()  # an answer with neither a length nor chunks ends with its connection
            return
        why = f": {exc}" if exc is not None else ""
        self._fail(ConnectionFailed(f"the connection closed before a whole answer{why}"))

    # -- httptools callbacks -----------------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"content-encoding":
            self._encoding = value.strip().lower()
        elif name.lower() in (b"content-length", b"transfer-encoding"):
            self._header = name.lower()

    def on_headers_complete(self) -> None:
        self._headers_done = True

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        status = self._parser.get_status_code()
        if 100 <= status < 200:  # an interim answer (100 Continue unasked for): the real one follows
            self._body, self._encoding, self._header, self._headers_done = [], b"", b"", False
            return
        self.reusable = self._parser.should_keep_alive()
        self._complete()

    # -- the request -------------------------------------------------------------------------------

    def _framed(self) -> bool:
        return bool(self._header)

    def _complete(self) -> None:
        answer, self._answer = self._answer, None
        body, self._body = b"".join(self._body), []
        encoding, self._encoding, self._header, self._headers_done = self._encoding, b"", b"", False
        if answer is None or answer.done():
            return
        try:
            if encoding in (b"gzip", b"x-gzip", b"deflate"):
                body = zlib.decompress(body, 47)  # 32 + 15: a gzip or a zlib header, whichever it has
            elif encoding not in (b"", b"identity"):
                raise ConnectionFailed(f"an answer in a content coding this client does not read: {encoding!r}")
        except (zlib.error, ConnectionFailed) as exc:
            self.reusable = False
            answer.set_exception(exc if isinstance(exc, ConnectionFailed) else ConnectionFailed(str(exc)))
            return
        answer.set_result(Answer(self._parser.get_status_code(), body))

    def _fail(self, exc: ConnectionFailed) -> None:
        self.reusable = False
        if self._answer is not None and not self._answer.done():
            self._answer.set_exception(exc)
        self._answer = None
        if self.transport is not None:
            self.transport.close()

    def send(self, head: bytes, body: bytes) -> asyncio.Future[Answer]:
        assert self.transport is not None and self._answer is None
        self._answer = asyncio.get_running_loop().create_future()
        self.answered = self.reusable = False
        self.transport.writelines((head, body))
        return self._answer

    def close(self) -> None:
        self.reusable = False
        if self.transport is not None:
            self.transport.close()


class Client:
    """Keep-alive connections per origin, for one event loop (:func:`client` gives the running loop's)."""

    def __init__(self) -> None:
        self._idle: dict[_Origin, list[_Connection]] = {}
        self._busy: set[_Connection] = set()
        self._tls: ssl.SSLContext | None = None

    async def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> Answer:
        """POST ``body`` to ``url`` with ``headers`` (and Host, Content-Length); the answer's status and
        body. :class:`ConnectionFailed` when no whole answer came; a caller's timeout or cancellation
        closes the connection."""
        origin, target = _split(url)
        head = (
            f"POST {target} HTTP/1.1\r\nHost: {origin.authority}\r\nContent-Length: {len(body)}\r\n".encode("latin-1")
            + _header_lines(headers)
            + b"\r\n"
        )
        for _ in range(2):  # a pooled connection found closed: once more, on a new one
            conn, reused = await self._connection(origin)
            self._busy.add(conn)
            try:
                answer = await conn.send(head, body)
            except ConnectionFailed:
                if reused and not conn.answered:
                    continue
                raise
            except BaseException:  # a timeout or cancellation: nobody reads this answer
                conn.close()
                raise
            finally:
                self._busy.discard(conn)
            if conn.reusable and not conn.closed:
                conn.idle_since = time.monotonic()
                self._idle.setdefault(origin, []).append(conn)
            else:
                conn.close()
            return answer
        raise AssertionError("unreachable")  # the second try's failure is raised above

    async def _connection(self, origin: _Origin) -> tuple[_Connection, bool]:
        idle = self._idle.get(origin)
        now = time.monotonic()
        while idle:
            conn = idle.pop()  # the most recently used: the likeliest to be alive
            if not conn.closed and now - conn.idle_since < IDLE_SECONDS:
                return conn, True
            conn.close()
        loop = asyncio.get_running_loop()
        tls: ssl.SSLContext | None = None
        if origin.scheme == "https":
            tls = self._tls = self._tls or ssl.create_default_context()
        try:
            _, conn = await loop.create_connection(
                _Connection, origin.host, origin.port, ssl=tls, server_hostname=origin.host if tls else None
            )
        except OSError as exc:
            raise CannotConnect(f"cannot connect to {origin.authority}: {type(exc).__name__}: {exc}") from None
        return conn, False

    def close(self) -> None:
        """Close every connection (calls in flight fail with ConnectionFailed)."""
        for conns in self._idle.values():
            for conn in conns:
                conn.close()
        self._idle.clear()
        for conn in list(self._busy):
            conn.close()


_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Client] = weakref.WeakKeyDictionary()


def client() -> Client:
    """The running event loop's client (connections belong to the loop that made them)."""
    loop = asyncio.get_running_loop()
    found = _clients.get(loop)
    if found is None:
        found = _clients[loop] = Client()
    return found


def close_clients() -> None:
    """Close the running loop's client and its connections (the gateway's close does)."""
    found = _clients.pop(asyncio.get_running_loop(), None)
    if found is not None:
        found.close()
