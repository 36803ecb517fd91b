"""A real aiohttp server on 127.0.0.1 for tests that answer HTTP requests themselves."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@asynccontextmanager
async def serving(posts: Mapping[str, Handler]) -> AsyncIterator[str]:
    """Serve ``posts`` (path -> handler of POST) on a free port; yield the base URL."""
    app = web.Application()
    for path, handler in posts.items():
        app.router.add_post(path, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()
