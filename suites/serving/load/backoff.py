"""Backing off from connection errors, per worker, without touching a healthy target's sends.

A target that refuses connections would otherwise be hammered: a closed loop sends again
the moment a connect fails (about 2,500 connects a second were seen), which also burns the
client's CPU and makes the level look client-bound. After a connect error the worker lets
one request at a time through (a probe), each after a wait that doubles from
``INITIAL_S`` to ``MAX_S``, jittered to [wait / 2, wait]; the first answer of any kind
(the target accepted the connection) resets it.

While no connect error has happened nothing waits and no lock is taken. Requests that
wait keep their intended send time, so the wait shows as queueing delay (actual send -
intended send), as the open loop's schedule requires.
"""

from __future__ import annotations

import asyncio
import random

INITIAL_S = 0.01
MAX_S = 1.0


class ConnectBackoff:
    """One worker's state: the current wait (0: healthy) and the probe's turn."""

    def __init__(self, rng: random.Random, initial_s: float = INITIAL_S, max_s: float = MAX_S):
        self._rng = rng
        self._initial_s = initial_s
        self._max_s = max_s
        self.wait_s = 0.0
        self.turn = asyncio.Lock()  # held by the probe from its wait to its answer

    @property
    def active(self) -> bool:
        return self.wait_s > 0

    async def pause(self) -> None:
        """The probe's wait before it tries to connect."""
        if self.wait_s > 0:
            await asyncio.sleep(self._rng.uniform(self.wait_s / 2, self.wait_s))

    def observe(self, connect_failed: bool, *, probe: bool) -> None:
        """After a request: any answer ends the backing off; a connect error starts it, and
        a failed probe doubles the wait. Requests sent before the backing off began fail
        together when a target goes away: they count once, not once each."""
        if not connect_failed:
            self.wait_s = 0.0
        elif probe or self.wait_s == 0:
            self.wait_s = min(self._max_s, max(self._initial_s, 2 * self.wait_s))
