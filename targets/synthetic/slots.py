"""A known serving capacity: at most N streams generate at once, the rest wait in FIFO order.

A request takes a slot once accepted and holds it to the end of its response (stalls and
faults included); one that finds every slot taken waits in a queue, in arrival order, and
its configured delays count from when it leaves the queue. So with N slots the capacity is
exact: the (N+1)-th concurrent request's TTFT is the queue wait plus ``ttft_s``, which is
what an SLO capacity search must find.

An explicit queue rather than ``asyncio.Semaphore``: a Semaphore is FIFO-fair in CPython
3.11.7 (its ``locked()`` counts waiters, so a newcomer cannot take a slot a waiter was
woken for; gh-90155), but that is not documented, and ``requires-python`` admits 3.11.0.
The queue is also what the ``waiting`` gauge counts.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from types import TracebackType


class StreamSlots:
    """``limit`` stream slots (0: no limit) handed out in arrival order.

    ``async with slots:`` waits for a slot, holds it for the block, and gives it back on
    any exit, cancellation (a client that went away) included. A released slot is handed
    straight to the first waiter, so ``running`` never drops below the limit while anyone
    waits and no newcomer can take it first.
    """

    def __init__(self, limit: int) -> None:
        if limit < 0:
            raise ValueError(f"limit must be >= 0; got {limit}")
        self.limit = limit
        self._running = 0
        # A waiter's future gets its result when a slot is handed to it.
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def running(self) -> int:
        """Requests holding a slot now."""
        return self._running

    @property
    def waiting(self) -> int:
        """Requests queued for a slot now."""
        return len(self._waiters)

    async def acquire(self) -> None:
        """Take a slot, waiting behind earlier arrivals when all are taken."""
        if self.limit == 0 or (self._running < self.limit and not self._waiters):
            self._running += 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.cancelled():
                # Cancelled in the queue: it leaves it, holding nothing (a release() in
                # between may have dropped it from the queue already).
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
            else:
                # Handed a slot just as it was cancelled: pass the slot on.
                self.release()
            raise

    def release(self) -> None:
        """Give a slot back: to the first waiter, or free it if nobody waits."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot changes hands; running is unchanged
                return
        self._running -= 1

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
