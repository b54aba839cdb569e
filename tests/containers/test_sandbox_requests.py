"""What a sandbox request carries, on both runtimes: bind mounts, env, network policy, the host's address,
and streaming exec for long agent runs."""

from __future__ import annotations

import asyncio
import http.server
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from anyswe.errors import SandboxError
from anyswe.sandbox import Mount, SandboxRequest, get_provider
from anyswe.sandbox.request import NetworkPolicy

pytestmark = pytest.mark.containers


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def test_read_only_mount_and_request_env(provider_image: tuple[str, str], tmp_path: Path) -> None:
    name, image = provider_image
    bundle = tmp_path / "bundle"
    (bundle / "bin").mkdir(parents=True)
    (bundle / "bin" / "tool").write_text("#!/bin/sh\necho tool ran with $BUNDLE_MODE\n")
    (bundle / "bin" / "tool").chmod(0o755)
    request = SandboxRequest(image, mounts=(Mount(str(bundle), "/opt/bundle"),), env={"BUNDLE_MODE": "a b $x"})

    async def go() -> None:
        async with get_provider(name).sandbox(request) as sb:
            r = await sb.exec(["/opt/bundle/bin/tool"])
            assert r.ok and r.stdout == "tool ran with a b $x\n", r
            # Per-exec env adds to (and may override) the request's.
            r = await sb.exec(["printenv", "BUNDLE_MODE"], env={"BUNDLE_MODE": "override"})
            assert r.stdout == "override\n"
            r = await sb.exec(["touch", "/opt/bundle/written"])
            assert r.exit_code != 0 and "Read-only" in r.stderr, r

    run(go())
    assert sorted(p.name for p in bundle.iterdir()) == ["bin"]


def test_writable_mount(provider_image: tuple[str, str], tmp_path: Path) -> None:
    name, image = provider_image
    state = tmp_path / "state"
    state.mkdir()
    request = SandboxRequest(image, mounts=(Mount(str(state), "/var/agent-state", read_only=False),))

    async def go() -> None:
        async with get_provider(name).sandbox(request) as sb:
            assert (await sb.exec("echo kept > /var/agent-state/out.txt")).ok

    run(go())
    assert (state / "out.txt").read_text() == "kept\n"


def test_mount_of_a_missing_path_is_refused(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        Mount(str(tmp_path / "missing"), "/opt/x")
    with pytest.raises(ValueError, match="absolute"):
        Mount(str(tmp_path), "relative/path")


#: The network on which each runtime's sandboxes reach the host (not the default: sandboxes are sealed).
OPEN: dict[str, NetworkPolicy] = {"docker": "bridge", "apptainer": "host"}


@pytest.fixture
def host_server(request: pytest.FixtureRequest) -> Iterator[tuple[str, int, str]]:
    """An HTTP server on the host at the address the provider's sandboxes reach it by (bridge/loopback)."""
    name = request.getfixturevalue("provider_image")[0]
    address = get_provider(name).host_address(OPEN[name])
    assert address is not None
    token = uuid.uuid4().hex

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = token.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer((address, 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield address, server.server_address[1], token
    finally:
        server.shutdown()
        server.server_close()


FETCH = (
    "import sys, urllib.request\n"
    "try:\n"
    "    print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())\n"
    "except OSError as exc:\n"
    "    print('unreachable', type(exc).__name__)\n"
)


def test_host_service_is_reachable_at_host_address(
    provider_image: tuple[str, str], host_server: tuple[str, int, str]
) -> None:
    name, image = provider_image
    _, port, token = host_server

    async def go() -> None:
        async with get_provider(name).sandbox(SandboxRequest(image, network=OPEN[name])) as sb:
            assert sb.host_address is not None
            r = await sb.exec(["python3", "-c", FETCH, f"http://{sb.host_address}:{port}/"], timeout=30)
            assert r.stdout.strip() == token, r

    run(go())


def test_sandboxes_are_sealed_by_default(provider_image: tuple[str, str], host_server: tuple[str, int, str]) -> None:
    """A request that names no network gets none: no host service, no registry, nothing beyond."""
    name, image = provider_image
    address, port, token = host_server

    async def go() -> None:
        async with get_provider(name).sandbox(image) as sb:
            assert sb.network == "none" and sb.host_address is None
            assert (await sb.exec(["ls", "/sys/class/net"])).stdout.split() == ["lo"]
            r = await sb.exec(["python3", "-c", FETCH, f"http://{address}:{port}/"], timeout=30)
            assert r.stdout.startswith("unreachable") and token not in r.stdout, r

    run(go())


def test_network_none_has_only_loopback_and_no_host(
    provider_image: tuple[str, str], host_server: tuple[str, int, str]
) -> None:
    name, image = provider_image
    address, port, token = host_server

    async def go() -> None:
        async with get_provider(name).sandbox(SandboxRequest(image, network="none")) as sb:
            assert sb.network == "none" and sb.host_address is None
            r = await sb.exec(["ls", "/sys/class/net"])
            assert r.stdout.split() == ["lo"], r
            r = await sb.exec(["python3", "-c", FETCH, f"http://{address}:{port}/"], timeout=30)
            assert r.stdout.startswith("unreachable") and token not in r.stdout, r

    run(go())


def test_unsupported_network_is_refused_not_ignored(sif_image: str) -> None:
    """Apptainer has no bridge network here: a request for one is an error, never a silent host network."""
    provider = get_provider("apptainer", {"concurrency": 1})
    with pytest.raises(SandboxError, match="cannot have network 'bridge'"):
        run(provider.start(SandboxRequest(sif_image, network="bridge")))

    async def then_one_starts() -> str:  # the refused request took no concurrency slot
        async with provider.sandbox(sif_image) as sb:
            return (await asyncio.wait_for(sb.exec(["true"]), 120)).stdout

    assert run(then_one_starts()) == ""


def test_streaming_exec_delivers_output_as_it_comes(provider_image: tuple[str, str], tmp_path: Path) -> None:
    """The command waits for a file the host creates only after it has seen the first line: without
    streaming, the first line would arrive at the end and the command would wait until its timeout."""
    name, image = provider_image
    log = tmp_path / "agent.log"
    script = "echo first; for i in $(seq 600); do [ -e /tmp/go ] && break; sleep 0.1; done; echo second; [ -e /tmp/go ]"

    async def go() -> None:
        async with get_provider(name).sandbox(image) as sb:
            chunks: list[tuple[str, str]] = []
            pending: list[asyncio.Task[object]] = []

            def on_output(stream: str, text: str) -> None:
                chunks.append((stream, text))
                if "first" in text and not pending:
                    pending.append(asyncio.get_running_loop().create_task(sb.exec(["touch", "/tmp/go"])))

            r = await sb.exec_stream(
                ["bash", "-c", script + "; echo err >&2"], log_path=log, on_output=on_output, timeout=120
            )
            await asyncio.gather(*pending)
            assert r.ok and r.stdout == "first\nsecond\n" and r.stderr == "err\n", r
            assert "".join(t for s, t in chunks if s == "stdout") == r.stdout
            assert pending, "the first line never arrived while the command ran"

    run(go())
    assert sorted(log.read_text().split()) == ["err", "first", "second"]


@pytest.fixture
def unix_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """An HTTP service on a unix socket on the host (what the model gateway will be)."""
    import socketserver

    directory = tmp_path_factory.mktemp("gw")
    path = str(directory / "gateway.sock")
    token = uuid.uuid4().hex

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = f"{token} {self.path}".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def address_string(self) -> str:
            return "unix"

        def log_message(self, *args: object) -> None:
            pass

    class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
        daemon_threads = True

    server = Server(path, Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield path, token
    finally:
        server.shutdown()
        server.server_close()


def test_gateway_network_reaches_its_service_and_nothing_else(
    provider_image: tuple[str, str], unix_service: tuple[str, str], host_server: tuple[str, int, str]
) -> None:
    from anyswe.sandbox import Gateway

    name, image = provider_image
    socket_path, token = unix_service
    address, port, host_token = host_server

    async def go() -> None:
        request = SandboxRequest(image, network="gateway", gateway=Gateway(socket_path, port=7777))
        async with get_provider(name).sandbox(request) as sb:
            assert sb.gateway_address == "127.0.0.1:7777" and sb.host_address == "127.0.0.1"
            for path in ("/v1/messages", "/v1/chat/completions"):
                r = await sb.exec(["python3", "-c", FETCH, f"http://{sb.gateway_address}{path}"], timeout=30)
                assert r.stdout.strip() == f"{token} {path}", r
            r = await sb.exec(["ls", "/sys/class/net"])
            assert r.stdout.split() == ["lo"], r
            # The host's other services are out of reach (a listener on the bridge or loopback).
            r = await sb.exec(["python3", "-c", FETCH, f"http://{address}:{port}/"], timeout=30)
            assert r.stdout.startswith("unreachable") and host_token not in r.stdout, r

    run(go())


def test_gateway_needs_its_socket(provider_image: tuple[str, str], tmp_path: Path) -> None:
    from anyswe.sandbox import Gateway

    name, image = provider_image
    with pytest.raises(ValueError, match="needs the request's `gateway`"):
        run(get_provider(name).start(SandboxRequest(image, network="gateway")))
    with pytest.raises(FileNotFoundError):
        Gateway(str(tmp_path / "no.sock"))
