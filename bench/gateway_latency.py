"""Benchmark: what the model gateway adds to each call, against the same upstream called directly.

Three processes, as in a run: the upstream (an OpenAI chat completions server answering a fixed tool
call after a set time, as a model takes its time), the gateway (anyswe's ``Gateway`` with a grant and
a trajectory per stream, as a task has, reaching the upstream through its direct OpenAI chat path),
and the load (this process: ``streams`` agents, each with a conversation that grows by a tool call and
its result per call). Each stream calls the upstream directly and through the gateway in turns, the
order drawn per pair, so both paths see the same load; ``added`` is the gateway's quantile minus the
direct one. The gateway's own CPU per call (its process's CPU time over the calls it served) says
what it costs whatever the machine's load. Then saturation: 64 streams, an upstream that answers at
once, gateway calls only. Prints figures; never asserts.

    uv run python bench/gateway_latency.py [--calls 40]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from aiohttp import ClientSession, ClientTimeout, TCPConnector, web

REPLY = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 0,
    "model": "m",
    "choices": [
        {
            "index": 0,
            "finish_reason": "tool_calls",
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
                ],
            },
        }
    ],
    "usage": {"prompt_tokens": 1200, "completion_tokens": 20, "total_tokens": 1220},
}
SYSTEM = {"role": "system", "content": "You are a careful engineer. " * 40}
TASK = {"role": "user", "content": "Fix the failing test. " * 40}
TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
#: What one tool call printed, as an agent's observation (a short `ls`, a test's output).
OBSERVATION = "tests/test_calc.py::test_add FAILED\nE   assert 3 == 4\n" * 8


# -- the upstream and the gateway, each a process of its own ------------------------------------------


async def serve_upstream() -> None:
    """POST /d/<ms>/v1/chat/completions: the fixed reply after <ms> milliseconds."""

    async def chat(request: web.Request) -> web.Response:
        await request.read()
        delay = float(request.match_info["ms"]) / 1000
        if delay:
            await asyncio.sleep(delay)
        return web.json_response(REPLY)

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/d/{ms}/v1/chat/completions", chat)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    print(json.dumps({"url": f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"}), flush=True)  # type: ignore[union-attr]
    await asyncio.Event().wait()


async def serve_gateway(upstream: str, delays: list[str], grants: int) -> None:
    """anyswe's gateway: ``grants`` grants per upstream delay, each with its own trajectory file."""
    from anyswe._sync import settle_heap
    from anyswe.gateway import Gateway
    from anyswe.gateway.upstream import HttpUpstream
    from anyswe.model import ModelSpec

    with tempfile.TemporaryDirectory() as tmp:
        async with Gateway() as gateway:
            await gateway.start()
            tokens: dict[str, list[str]] = {}
            for ms in delays:
                spec = ModelSpec(api="openai-chat", base_url=f"{upstream}/d/{ms}/v1", model="m")
                tokens[ms] = [
                    gateway.grant(f"task-{ms}-{n}", "m", HttpUpstream(spec), trajectory=Path(tmp) / f"{ms}-{n}.jsonl")
                    for n in range(grants)
                ]
            settle_heap()  # as `anyswe apply` and `anyswe serve` do once set up
            print(json.dumps({"url": gateway.url(), "tokens": tokens}), flush=True)
            await asyncio.Event().wait()


async def serve_passthrough(upstream: str, client: str) -> None:
    """The floor: a bare aiohttp server that posts each body on to the upstream as it came and gives its
    answer back (no tokens, no conversation, no trajectory), through a pooled client: aiohttp's own
    (``client`` "aiohttp": a bare aiohttp hop, what any aiohttp proxy costs) or the gateway's
    (``"anyswe"``: gateway/http1.py, so what the gateway adds beyond it is its own work)."""
    import aiohttp

    from anyswe.gateway.http1 import client as http1_client

    session = aiohttp.ClientSession(connector=TCPConnector(limit=0), timeout=ClientTimeout(total=600))
    headers = {"Content-Type": "application/json"}

    async def forward(request: web.Request) -> web.Response:
        body = await request.read()
        if client == "anyswe":
            status, answer = await http1_client().post(upstream + request.path, body, headers)
            return web.Response(body=answer, status=status, content_type="application/json")
        async with session.post(upstream + request.path, data=body, headers=headers) as r:
            return web.Response(body=await r.read(), status=r.status, content_type="application/json")

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/{tail:.+}", forward)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    print(json.dumps({"url": f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"}), flush=True)  # type: ignore[union-attr]
    await asyncio.Event().wait()


def _start(*args: str) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    proc = subprocess.Popen([sys.executable, __file__, *args], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, json.loads(proc.stdout.readline())


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- the load -----------------------------------------------------------------------------------------


class Stream:
    """One agent: a conversation growing by a call and its result each turn."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = [SYSTEM, TASK]

    def body(self) -> dict[str, Any]:
        return {"model": "m", "messages": self.messages, "tools": TOOLS}

    def advance(self, n: int) -> None:
        call = {"id": f"call_{n}", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
        self.messages = [
            *self.messages,
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"call_{n}", "content": OBSERVATION},
        ]


async def run_streams(
    session: ClientSession,
    direct: str,
    gateway: str,
    tokens: list[str],
    streams: int,
    calls: int,
    both: bool = True,
    tool_s: float = 0.0,
) -> tuple[list[float], list[float], float]:
    """``streams`` agents, ``calls`` turns each: per turn a direct and a gateway call (in a drawn order),
    or the gateway alone (``both`` False), then the turn's tool run (uniform in 0..2 ``tool_s``, as an
    agent runs a command between model calls; streams start spread over as long): agents' calls are
    not in lockstep, as none are in a run. Latencies in ms (direct, gateway) and the wall time."""
    direct_ms: list[float] = []
    gateway_ms: list[float] = []

    async def call(url: str, headers: dict[str, str], body: dict[str, Any], into: list[float]) -> None:
        t = time.perf_counter()
        async with session.post(url, json=body, headers=headers) as resp:
            await resp.read()
            assert resp.status == 200, (resp.status, await resp.text())
        into.append((time.perf_counter() - t) * 1000)

    async def agent(i: int) -> None:
        stream, auth = Stream(), {"Authorization": f"Bearer {tokens[i]}"}
        await asyncio.sleep(random.uniform(0, 2 * tool_s))
        for n in range(calls):
            body = stream.body()
            pair = [(gateway, auth, gateway_ms)] + ([(direct, {}, direct_ms)] if both else [])
            random.shuffle(pair)
            for url, headers, into in pair:
                await call(url, headers, body, into)
            stream.advance(n)
            if tool_s:
                await asyncio.sleep(random.uniform(0, 2 * tool_s))

    t0 = time.perf_counter()
    await asyncio.gather(*(agent(i) for i in range(streams)))
    return direct_ms, gateway_ms, time.perf_counter() - t0


def q(values: list[float], p: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


#: (upstream ms, streams, rounds): one agent alone, 64 agents on a model's real pace (a second a call),
#: then 64 on a fast one (100 ms: several hundred calls a second offered). An agent's tool runs take
#: about as long as its model calls (uniform around the upstream's time).
SCENARIOS = ((100, 1, 5), (1000, 64, 1), (100, 64, 1))


def _row(ms: int, streams: int, d: list[float], g: list[float], cpu_ms: float, wall: float) -> str:
    return (
        f"upstream {ms:4d} ms, {streams:2d} streams, {len(g):5d} calls each way: direct p50 {q(d, 50):7.2f} "
        f"p99 {q(d, 99):7.2f} | gateway p50 {q(g, 50):7.2f} p99 {q(g, 99):7.2f} | added p50 "
        f"{q(g, 50) - q(d, 50):5.2f} ms p99 {q(g, 99) - q(d, 99):5.2f} ms | gateway CPU {cpu_ms:.2f} ms/call, "
        f"{2 * len(g) / wall:.0f} calls/s offered"
    )


async def main(args: argparse.Namespace) -> None:
    delays = sorted({str(ms) for ms, _, _ in SCENARIOS} | {"0"})
    upstream, up = _start("--serve-upstream")
    gateway, gw = _start("--serve-gateway", up["url"], ",".join(delays), "128")
    floors = {
        "bare aiohttp pass-through": _start("--serve-passthrough", up["url"], "aiohttp"),
        "pass-through, the gateway's client": _start("--serve-passthrough", up["url"], "anyswe"),
    }
    try:
        async with ClientSession(connector=TCPConnector(limit=0), timeout=ClientTimeout(total=600)) as session:
            through = gw["url"] + "/v1/chat/completions"
            await run_streams(session, f"{up['url']}/d/0/v1/chat/completions", through, gw["tokens"]["0"], 8, 10)
            for ms, streams, rounds in SCENARIOS:
                direct_url, tokens = f"{up['url']}/d/{ms}/v1/chat/completions", gw["tokens"][str(ms)]
                d: list[float] = []
                g: list[float] = []
                before, t0 = cpu_seconds(gateway.pid), time.perf_counter()
                for r in range(rounds):  # a new conversation (and grant) per round
                    more = await run_streams(
                        session, direct_url, through, tokens[r * streams :], streams, args.calls, tool_s=ms / 1000
                    )
                    d, g = d + more[0], g + more[1]
                cpu_ms = (cpu_seconds(gateway.pid) - before) * 1000 / len(g)
                print(_row(ms, streams, d, g, cpu_ms, time.perf_counter() - t0), flush=True)
                # The same load through the bare pass-throughs: what any aiohttp proxy adds here, and
                # what one with the gateway's own client does.
                for name, (floor, bare) in floors.items():
                    bare_url, no_tokens = bare["url"] + f"/d/{ms}/v1/chat/completions", ["-"] * (rounds * streams)
                    d, b = [], []
                    before, t0 = cpu_seconds(floor.pid), time.perf_counter()
                    for r in range(rounds):
                        more = await run_streams(
                            session,
                            direct_url,
                            bare_url,
                            no_tokens[r * streams :],
                            streams,
                            args.calls,
                            tool_s=ms / 1000,
                        )
                        d, b = d + more[0], b + more[1]
                    cpu_ms = (cpu_seconds(floor.pid) - before) * 1000 / len(b)
                    print(f"  {name}: " + _row(ms, streams, d, b, cpu_ms, time.perf_counter() - t0), flush=True)
            before = cpu_seconds(gateway.pid)
            _, g, wall = await run_streams(session, "", through, gw["tokens"]["0"][64:], 64, args.calls, both=False)
            cpu = cpu_seconds(gateway.pid) - before
            print(
                f"saturation: 64 streams, upstream answering at once: {len(g) / wall:.0f} calls/s through the "
                f"gateway, its CPU {1000 * cpu / len(g):.2f} ms/call ({100 * cpu / wall:.0f}% of a core)",
                flush=True,
            )
    finally:
        for proc in (gateway, *(p for p, _ in floors.values()), upstream):
            proc.terminate()
            proc.wait(timeout=30)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=40, help="turns per conversation")
    parser.add_argument("--serve-upstream", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--serve-passthrough", nargs=2, metavar=("UPSTREAM", "CLIENT"), help=argparse.SUPPRESS)
    parser.add_argument("--serve-gateway", nargs=3, metavar=("UPSTREAM", "DELAYS", "GRANTS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_upstream:
        asyncio.run(serve_upstream())
    elif args.serve_passthrough:
        asyncio.run(serve_passthrough(*args.serve_passthrough))
    elif args.serve_gateway:
        up_url, delay_list, grants = args.serve_gateway
        asyncio.run(serve_gateway(up_url, delay_list.split(","), int(grants)))
    else:
        asyncio.run(main(args))
