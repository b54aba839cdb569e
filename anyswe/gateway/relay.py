"""A relay to the run's model gateway when it runs on another machine (a Ray node's units).

The gateway listens on the driver's machine. Sandboxes reach it through a unix socket mounted into
them, and host-side agents (mini-swe-agent) over loopback TCP; neither exists on another host. A
unit whose endpoint names a ``relay`` address (``host:port`` of the gateway as the cluster reaches
it) runs inside a :class:`Relay`: a unix socket and a loopback port on the node, each connection
piped byte for byte to the gateway. Nothing is parsed or kept here; tokens, budgets and trajectories
stay the gateway's, on the driver.

A node that cannot reach the gateway must not pass for an agent that failed: ``Worker.run`` checks
the relay can connect before the unit starts (a clear infra error otherwise), and the relay counts
connections it could not carry, which make an unresolved result an infra error too.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from anyswe.errors import RuntimeNotAvailable

if TYPE_CHECKING:
    from anyswe.model import ModelEndpoint

_CHUNK = 64 * 1024
#: Seconds to wait for the gateway to accept a connection.
CONNECT_TIMEOUT = 30.0


def split_address(address: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too) as (host, port); a clear error for anything else."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise RuntimeNotAvailable(f"model gateway relay address {address!r} is not host:port")
    return host.strip("[]"), int(port)


def join_address(host: str, port: int) -> str:
    """``host:port``, an IPv6 host in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class Relay:
    """``await relay.reachable()``, then ``async with relay: endpoint = relay.endpoint(endpoint)``."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.host, self.port = split_address(address)
        self._servers: list[asyncio.Server] = []
        self._dir: tempfile.TemporaryDirectory[str] | None = None
        self._open: set[asyncio.StreamWriter] = set()
        self.socket: Path | None = None
        self.local_port = 0
        #: Connections an agent made that could not reach the gateway, and the last reason.
        self.failures = 0
        self.last_failure = ""

    async def reachable(self) -> None:
        """Connect to the gateway once; :class:`RuntimeNotAvailable` naming the address if this node cannot."""
        try:
            _, probe = await self._connect()
        except (OSError, TimeoutError) as exc:
            raise RuntimeNotAvailable(
                f"this node ({socket.gethostname()}) cannot reach the model gateway at {self.address} "
                f"(the driver's executor.gateway_host; is its port open to the nodes?): {exc or type(exc).__name__}"
            ) from None
        probe.close()

    async def __aenter__(self) -> Relay:
        # The socket's directory is bind-mounted into sandboxes: a directory of its own (mkdtemp: 0700).
        self._dir = tempfile.TemporaryDirectory(prefix="anyswe-relay-")
        self.socket = Path(self._dir.name) / "gateway.sock"
        try:
            self._servers.append(await asyncio.start_unix_server(self._serve, path=str(self.socket)))
            tcp = await asyncio.start_server(self._serve, "127.0.0.1", 0)
            self._servers.append(tcp)
            self.local_port = tcp.sockets[0].getsockname()[1]
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.shield(self.close())

    def endpoint(self, endpoint: ModelEndpoint) -> ModelEndpoint:
        """``endpoint`` as reached on this machine: through the relay's socket and loopback port."""
        return endpoint.model_copy(
            update={"base_url": f"http://127.0.0.1:{self.local_port}", "socket": str(self.socket), "relay": None}
        )

    async def close(self) -> None:
        for server in self._servers:
            server.close()
        # Open connections are aborted, not their handlers cancelled (a cancelled handler of
        # asyncio's server is logged as an error); an abort does not wait for a peer that stopped reading.
        for writer in list(self._open):
            writer.transport.abort()
        for server in self._servers:
            with contextlib.suppress(Exception):
                await server.wait_closed()
        self._servers.clear()
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.wait_for(asyncio.open_connection(self.host, self.port), CONNECT_TIMEOUT)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._open.add(writer)
        try:
            try:
                up_reader, up_writer = await self._connect()
            except (OSError, TimeoutError) as exc:
                # The agent sees its connection closed unanswered; the unit learns of it (failures).
                self.failures += 1
                self.last_failure = f"{type(exc).__name__}: {exc}"
                return
            self._open.add(up_writer)
            try:
                await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
            finally:
                up_writer.close()
                self._open.discard(up_writer)
        finally:
            writer.close()
            self._open.discard(writer)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy until EOF, then half-close (an HTTP client may wait for the reply after sending)."""
    try:
        while chunk := await reader.read(_CHUNK):
            writer.write(chunk)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except OSError:
        writer.close()
