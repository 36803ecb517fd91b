"""Running the synthetic server on an event loop: started, served until stopped, closed.

Only loopback hosts are accepted: ground truth is only exact on the same host, and the
server has no authentication.
"""

from __future__ import annotations

import asyncio
import ipaddress
import time
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CollectorRegistry

from moeperf.targets.ready_line import base_url
from moeperf.targets.synthetic.config import SyntheticConfig
from moeperf.targets.synthetic.first_bytes import stamping
from moeperf.targets.synthetic.server import build_app
from moeperf.targets.synthetic.state import STATE, ClockNs

_LINGERING_S = 1.0


@dataclass
class RunningServer:
    """A synthetic server listening on ``host:port``; ``close()`` stops it."""

    runner: web.AppRunner
    listener: asyncio.Server
    host: str
    port: int

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:8000`` (no trailing slash)."""
        return base_url(self.host, self.port)

    async def close(self) -> None:
        """Stop listening and end the requests still running (after at most 1 s)."""
        self.listener.close()
        await self.runner.cleanup()


async def start(
    config: SyntheticConfig,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    clock_ns: ClockNs = time.monotonic_ns,
    registry: CollectorRegistry | None = None,
) -> RunningServer:
    """Start the server on the running event loop; ``port=0`` picks a free port."""
    require_loopback(host)
    # handler_cancellation: aiohttp cancels the handler of a client that went away, so a
    # request queued for a stream slot (nothing written yet, no write to fail) leaves the
    # queue at once instead of taking a slot later; a stream being written ends at once
    # too, stall or not, rather than at its next write.
    # lingering_time: after refusing a body it did not read (408, 413), aiohttp reads and
    # drops the rest before closing, so the client gets the answer rather than a reset;
    # by default for 10 s, which a client dribbling its body would fill. 1 s is enough
    # for a client that sends at any real speed.
    runner = web.AppRunner(
        build_app(config, clock_ns, registry),
        access_log=None,
        shutdown_timeout=1.0,
        handler_cancellation=True,
        lingering_time=_LINGERING_S,
    )
    await runner.setup()
    assert runner.server is not None  # set by setup()
    # aiohttp's server is a protocol factory (its low-level server API); each connection's
    # protocol is wrapped to note when a request's first bytes are read (first_bytes.py),
    # so listening goes through the loop here rather than a web.TCPSite.
    factory = stamping(runner.server, runner.app[STATE].first_bytes)
    try:
        listener = await asyncio.get_running_loop().create_server(factory, host, port)
    except BaseException:
        await runner.cleanup()
        raise
    return RunningServer(runner, listener, host, listener.sockets[0].getsockname()[1])


async def serve(
    config: SyntheticConfig,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    on_ready: Callable[[RunningServer], None] | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Run the server until ``stop`` is set (or the task is cancelled), then close it."""
    server = await start(config, host, port)
    try:
        if on_ready is not None:
            on_ready(server)
        await (stop if stop is not None else asyncio.Event()).wait()
    finally:
        await server.close()


def require_loopback(host: str) -> None:
    """Raise ValueError unless ``host`` is a loopback address (or ``localhost``)."""
    if host == "localhost":
        return
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ValueError(f"host must be a loopback address such as 127.0.0.1; got {host!r}")
