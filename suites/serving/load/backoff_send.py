"""A worker's sends through its connect backoff: straight through while the target answers,
one probe at a time after connect errors.

Apart from backoff.py, which holds the backoff's state and rules (how long to wait, when
to reset), this is the send path that follows them: the probe's turn, the requests held
until theirs, and handing the turn on as soon as the probe has an answer. It is apart from
the level runner (level.py) so the runner's pacing does not mix with the backing off.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from moeperf.collectors.records import RequestRecord
from moeperf.suites.serving.load.backoff import ConnectBackoff
from moeperf.suites.serving.load.client import StreamResult


class StreamFn(Protocol):
    """Streams one request into ``record``; ``on_answer`` is called once the target has
    answered (the level runner's stream, on its current session)."""

    def __call__(
        self,
        body: dict[str, Any],
        record: RequestRecord,
        on_answer: Callable[[], None] = ...,
    ) -> Coroutine[Any, Any, StreamResult]: ...


class BackoffSender:
    """One worker's send path through ``backoff``, kept across levels (a target that is
    down stays backed off until it answers)."""

    def __init__(self, backoff: ConnectBackoff, stream: StreamFn) -> None:
        self.backoff = backoff
        self.held: set[asyncio.Task[None]] = set()  # waiting for their backoff turn, unsent
        self._stream = stream

    async def send(self, body: dict[str, Any], record: RequestRecord) -> StreamResult:
        backoff = self.backoff
        # The healthy path takes no lock and waits for nothing.
        probe = await self._probe_turn(body, record) if backoff.active else None
        # Cancelling ``await probe`` cancels the probe too.
        result = await (probe if probe is not None else self._stream(body, record))
        backoff.observe(record.error_type == "connect_error", probe=probe is not None)
        return result

    async def _probe_turn(
        self, body: dict[str, Any], record: RequestRecord
    ) -> asyncio.Task[StreamResult] | None:
        """Wait for this worker's one probe turn after connect errors, then send the probe;
        None when the target answered another probe meanwhile (send as usual).

        The turn passes to the next waiting request as soon as the probe has an answer or
        has failed, so a target that is back is not held up by a probe's whole stream.
        Until it is sent the request is in ``held``: at the level's end it is cancelled
        (it was never sent), not drained.
        """
        backoff = self.backoff
        held = asyncio.current_task()
        assert held is not None  # always called from the request's own task
        self.held.add(held)
        try:
            async with backoff.turn:
                if not backoff.active:
                    return None
                await backoff.pause()
                self.held.discard(held)
                return await self._send_probe(body, record)
        finally:
            self.held.discard(held)

    async def _send_probe(
        self, body: dict[str, Any], record: RequestRecord
    ) -> asyncio.Task[StreamResult]:
        """Start the probe; return once the target answered it or it failed."""
        answered = asyncio.Event()
        probe = asyncio.create_task(self._stream(body, record, answered.set))
        waiter = asyncio.create_task(answered.wait())
        try:
            await asyncio.wait({probe, waiter}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            probe.cancel()
            await asyncio.gather(probe, return_exceptions=True)
            raise
        finally:
            waiter.cancel()
        return probe
