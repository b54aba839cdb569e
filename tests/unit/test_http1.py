"""The gateway's upstream HTTP/1.1 client (anyswe/gateway/http1.py) against real servers on loopback:
aiohttp's, for what a policy server behind uvicorn or aiohttp does (keep-alive, TLS), and raw asyncio
servers that answer the way the protocol allows and misbehave the way servers do (chunks, gzip, an
answer ended by its connection, an interim 100, a keep-alive connection closed while idle or as a
request arrives, a connection lost mid-answer, an answer that is not HTTP)."""

from __future__ import annotations

import asyncio
import gzip
import shutil
import ssl
import subprocess
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from aiohttp import web

from anyswe.gateway import http1
from anyswe.gateway.http1 import Client, ConnectionFailed

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@asynccontextmanager
async def aiohttp_server(ssl_context: ssl.SSLContext | None = None) -> AsyncIterator[tuple[str, list[object]]]:
    """An aiohttp server echoing each body; the peers (one per connection) it served."""
    peers: list[object] = []

    async def echo(request: web.Request) -> web.Response:
        transport = request.transport
        peer = transport.get_extra_info("peername") if transport is not None else None
        if peer not in peers:
            peers.append(peer)
        return web.Response(body=b"got " + await request.read(), headers={"X-Seen": request.headers["X-Test"]})

    app = web.Application()
    app.router.add_post("/v1/echo", echo)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_context)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"{'https' if ssl_context else 'http'}://127.0.0.1:{port}/v1/echo?x=1", peers
    finally:
        await runner.cleanup()


@asynccontextmanager
async def raw_server(answer: Callable[[bytes, asyncio.StreamWriter, int], object]) -> AsyncIterator[dict[str, int]]:
    """A server that reads each request (head and Content-Length body) and hands it to ``answer``
    (the request, the writer, the request's number on its connection); counts connections and requests."""
    seen = {"connections": 0, "requests": 0, "closed": 0}

    async def conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen["connections"] += 1
        n = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                )
                body = await reader.readexactly(length)
                seen["requests"] += 1
                n += 1
                result = answer(head + body, writer, n)
                if asyncio.iscoroutine(result):
                    await result
                if writer.is_closing():
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            seen["closed"] += 1
            writer.close()

    server = await asyncio.start_server(conn, "127.0.0.1", 0)
    seen["port"] = server.sockets[0].getsockname()[1]
    try:
        yield seen
    finally:
        server.close()


def url(seen: dict[str, int]) -> str:
    return f"http://127.0.0.1:{seen['port']}/v1/chat/completions"


def ok(body: bytes, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (len(body), extra, body)


async def test_keep_alive_one_connection_for_many_calls_and_the_request_as_sent() -> None:
    client = Client()
    async with aiohttp_server() as (where, peers):
        for n in range(3):
            answer = await client.post(where, b'{"n": %d}' % n, {"X-Test": "t", "Content-Type": "application/json"})
            assert answer == http1.Answer(200, b'got {"n": %d}' % n)
        assert len(peers) == 1  # one connection, reused
    client.close()


async def test_a_chunked_answer_and_a_gzipped_one_are_read_whole() -> None:
    def answer(request: bytes, writer: asyncio.StreamWriter, n: int) -> None:
        if n == 1:
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
        else:
            writer.write(ok(gzip.compress(b"zipped"), b"Content-Encoding: gzip\r\n"))

    client = Client()
    async with raw_server(answer) as seen:
        assert (await client.post(url(seen), b"{}", {})).body == b"hello world"
        assert (await client.post(url(seen), b"{}", {})).body == b"zipped"
        assert seen["connections"] == 1
    client.close()


async def test_an_answer_ended_by_its_connection_and_an_interim_100_before_the_answer() -> None:
    def answer(request: bytes, writer: asyncio.StreamWriter, n: int) -> None:
        if b"eof" in request:
            writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end")
            writer.close()
        else:
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n" + ok(b"after 100"))

    client = Client()
    async with raw_server(answer) as seen:
        assert await client.post(url(seen), b"eof", {}) == http1.Answer(200, b"until the end")
        assert await client.post(url(seen), b"{}", {}) == http1.Answer(200, b"after 100")
        assert seen["connections"] == 2  # the first was not kept: it ended with its answer
    client.close()


async def test_a_keep_alive_connection_the_server_closed_is_replaced() -> None:
    """uvicorn closes an idle connection after 5 s: found closed on use, the request goes on a new one."""

    async def answer(request: bytes, writer: asyncio.StreamWriter, n: int) -> None:
        writer.write(ok(b"fine"))
        await writer.drain()
        writer.close()  # no Connection: close header: the client may pool it, as it would a timed-out one

    client = Client()
    async with raw_server(answer) as seen:
        for _ in range(3):
            assert (await client.post(url(seen), b"{}", {})).body == b"fine"
            await asyncio.sleep(0.05)
        assert (seen["connections"], seen["requests"]) == (3, 3)
    client.close()


async def test_a_pooled_connection_closed_as_the_request_arrives_is_tried_once_more() -> None:
    """The race of a keep-alive timeout: the server closes the connection with the request unanswered."""

    def answer(request: bytes, writer: asyncio.StreamWriter, n: int) -> None:
        if n == 1:
            writer.write(ok(b"first"))
        else:
            writer.close()  # the second request on this connection: closed, no answer

    client = Client()
    async with raw_server(answer) as seen:
        assert (await client.post(url(seen), b"{}", {})).body == b"first"
        assert (await client.post(url(seen), b"{}", {})).body == b"first"  # on a new connection
        assert seen["connections"] == 2
    client.close()


async def test_a_fresh_connection_that_fails_and_an_answer_cut_short_are_connection_failures() -> None:
    def answer(request: bytes, writer: asyncio.StreamWriter, n: int) -> None:
        if b"cut" in request:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten b")
        elif b"garbage" in request:
            writer.write(b"SMTP ready\r\n\r\n")
        writer.close()

    client = Client()
    async with raw_server(answer) as seen:
        for body, why in ((b"{}", "closed before a whole answer"), (b"cut", "closed before"), (b"garbage", "not HTTP")):
            with pytest.raises(ConnectionFailed, match=why):
                await client.post(url(seen), body, {})
        assert seen["requests"] == 3  # none was sent twice: a fresh connection's failure is the caller's
    client.close()
    with pytest.raises(ConnectionFailed, match="cannot connect"):
        await Client().post(f"http://127.0.0.1:{seen['port']}/", b"{}", {})  # the server is gone


async def test_a_cancelled_call_closes_its_connection() -> None:
    """An agent gone mid-call: the upstream sees the disconnect (vLLM then stops generating)."""
    arrived, gone = asyncio.Event(), asyncio.Event()

    async def conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        arrived.set()
        if await reader.read(1) == b"":  # nothing more, then the end: the client closed
            gone.set()
        writer.close()

    server = await asyncio.start_server(conn, "127.0.0.1", 0)
    client = Client()
    call = asyncio.ensure_future(client.post(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/", b"", {}))
    await asyncio.wait_for(arrived.wait(), 10)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    await asyncio.wait_for(gone.wait(), 10)
    server.close()


async def test_headers_that_would_split_the_request_are_refused() -> None:
    with pytest.raises(ValueError, match="cannot be sent"):
        await Client().post("http://127.0.0.1:9/", b"", {"Authorization": "Bearer x\r\nX-Injected: 1"})
    with pytest.raises(ValueError, match="not an http"):
        await Client().post("ftp://127.0.0.1/", b"", {})


async def test_https_with_the_systems_trust(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """TLS to a server whose certificate the default context trusts (here, through SSL_CERT_FILE)."""
    openssl = shutil.which("openssl")
    assert openssl, "openssl (Debian's, in every base system) makes the test's certificate"
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    served.load_cert_chain(cert, key)
    async with aiohttp_server(served) as (where, _):
        with pytest.raises(ConnectionFailed):  # not trusted yet
            await Client().post(where, b"{}", {"X-Test": "t"})
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        client = Client()
        assert await client.post(where, b"{}", {"X-Test": "t"}) == http1.Answer(200, b"got {}")
        client.close()
