"""What an embedded target needs to run as a child process: the fastest event loop here,
and stopping by itself when the process that started it is gone."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

PARENT_POLL_S = 0.5


def event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop where it exists, else None (asyncio's default loop)."""
    try:
        import uvloop
    except ImportError:  # not available on Windows: the default loop still works
        return None
    return uvloop.new_event_loop


async def stop_when_orphaned(
    parent_pid: int, is_stopped: Callable[[], bool], stop: Callable[[], None]
) -> None:
    """Call ``stop`` once this process is re-parented (its parent died), until stopped."""
    # A parent killed outright cannot stop us; being re-parented is the sign it is gone.
    while not is_stopped():
        if os.getppid() != parent_pid:
            stop()
        await asyncio.sleep(PARENT_POLL_S)
