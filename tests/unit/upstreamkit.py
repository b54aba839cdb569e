"""A real HTTP model upstream on loopback for the direct-upstream tests: the routes given, each with
its handler; the base URL (``.../v1``) while it runs. The gateway's pooled upstream sessions are
closed with it, so each test's event loop starts with none."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager

from aiohttp import web

from anyswe.gateway import openai_chat

Handler = Callable[[web.Request], Awaitable[web.Response]]


@asynccontextmanager
async def upstream(answer: Handler, paths: Iterable[str] = ("/v1/chat/completions",)) -> AsyncIterator[str]:
    app = web.Application()
    for path in paths:
        app.router.add_post(path, answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/v1"  # type: ignore[union-attr]
    finally:
        await openai_chat.close_sessions()
        await runner.cleanup()
