"""A real aiohttp server on 127.0.0.1 for tests that answer HTTP requests themselves.

``serving`` runs in the test's own event loop (async tests); ``serving_in_thread`` runs on
a thread with its own loop, for tests that call blocking code (``moeperf run``) that
drives it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@asynccontextmanager
async def serving(
    posts: Mapping[str, Handler], gets: Mapping[str, Handler] | None = None
) -> AsyncIterator[str]:
    """Serve ``posts`` (path -> handler of POST) and ``gets`` on a free port; yield the
    base URL."""
    app = web.Application()
    for path, handler in posts.items():
        app.router.add_post(path, handler)
    for path, handler in (gets or {}).items():
        app.router.add_get(path, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@contextmanager
def serving_in_thread(
    posts: Mapping[str, Handler], gets: Mapping[str, Handler] | None = None
) -> Iterator[str]:
    """``serving`` on a daemon thread's own event loop; yield the base URL."""
    loop = asyncio.new_event_loop()
    started: asyncio.Future[str] = loop.create_future()
    stop = asyncio.Event()

    async def main() -> None:
        async with serving(posts, gets) as url:
            started.set_result(url)
            await stop.wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    url = asyncio.run_coroutine_threadsafe(asyncio.wait_for(_wait(started), 10), loop).result()
    try:
        yield url
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
        loop.close()


async def _wait(future: asyncio.Future[str]) -> str:
    return await future
