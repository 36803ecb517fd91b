"""What an embedded target needs to run as a child process: the flags every target's
``__main__`` takes, the fastest event loop here, and stopping by itself on SIGTERM, on
SIGINT and when the process that started it is gone.

How it tells its parent where it listens is the READY line (``ready_line.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
from collections.abc import Callable

PARENT_POLL_S = 0.5


def add_listen_flags(
    parser: argparse.ArgumentParser, *, host_help: str, default_port: int, config_help: str
) -> None:
    """``--host``, ``--port`` (0 picks a free port) and ``--config JSON``."""
    parser.add_argument("--host", default="127.0.0.1", help=host_help)
    parser.add_argument("--port", type=int, default=default_port, help="0 picks a free port")
    parser.add_argument("--config", default=None, metavar="JSON", help=config_help)


def add_exit_with_parent_flag(parser: argparse.ArgumentParser) -> None:
    """``--exit-with-parent``: see ``stop_on_signals``."""
    parser.add_argument(
        "--exit-with-parent",
        action="store_true",
        help="stop when the process that started this one is gone (no orphaned servers)",
    )


def port_error(port: int) -> str | None:
    """Why ``port`` cannot be listened on, or None."""
    return None if 0 <= port <= 65535 else f"--port must be in [0, 65535]; got {port}"


def event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop where it exists, else None (asyncio's default loop)."""
    try:
        import uvloop
    except ImportError:  # not available on Windows: the default loop still works
        return None
    return uvloop.new_event_loop


def stop_on_signals(
    is_stopped: Callable[[], bool], stop: Callable[[], None], parent_pid: int | None
) -> asyncio.Task[None] | None:
    """Call ``stop`` on SIGTERM and SIGINT, and once orphaned when ``parent_pid`` is given.

    Called on the running loop; the orphan watcher's task (cancel it when done), or None.
    """
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop)
    if parent_pid is None:
        return None
    return loop.create_task(stop_when_orphaned(parent_pid, is_stopped, stop))


async def stop_when_orphaned(
    parent_pid: int, is_stopped: Callable[[], bool], stop: Callable[[], None]
) -> None:
    """Call ``stop`` once this process is re-parented (its parent died), until stopped."""
    # A parent killed outright cannot stop us; being re-parented is the sign it is gone.
    while not is_stopped():
        if os.getppid() != parent_pid:
            stop()
        await asyncio.sleep(PARENT_POLL_S)
