"""The harness watching itself: event-loop lag and its own CPU use during a level.

Lag is probed the way it hurts measurements: how long a callback made ready now waits
before the loop runs it. A chunk's bytes that arrive while the loop is busy wait just as
long before they are timestamped, so this lag bounds the timestamp error the load adds.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

import numpy as np

from moeperf.collectors.serving_records import SelfWatchSummary

PROBE_INTERVAL_S = 0.01


def _resolve(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)


class SelfWatch:
    """Samples event-loop lag every ``interval_s`` while running."""

    def __init__(
        self,
        interval_s: float = PROBE_INTERVAL_S,
        clock_ns: Callable[[], int] = time.monotonic_ns,
    ):
        self._interval_s = interval_s
        self._clock_ns = clock_ns
        self._lags_ns: list[int] = []
        self._task: asyncio.Task | None = None
        self._cpu_start_s = 0.0
        self._wall_start_ns = 0
        self._recent_index = 0
        self._recent_cpu_s = 0.0
        self._recent_wall_ns = 0

    def recent(self) -> tuple[float, float]:
        """Event-loop lag p99 (s) and CPU ratio since the previous call (for live export)."""
        now_ns = self._clock_ns()
        cpu_s = time.process_time()
        lags = self._lags_ns[self._recent_index :]
        self._recent_index = len(self._lags_ns)
        wall_s = (now_ns - self._recent_wall_ns) / 1e9
        cpu_ratio = (cpu_s - self._recent_cpu_s) / wall_s if wall_s > 0 else 0.0
        self._recent_wall_ns, self._recent_cpu_s = now_ns, cpu_s
        lag_p99_s = float(np.quantile(lags, 0.99)) / 1e9 if lags else 0.0
        return lag_p99_s, cpu_ratio

    def start(self) -> None:
        self._cpu_start_s = time.process_time()
        self._wall_start_ns = self._clock_ns()
        self._recent_cpu_s, self._recent_wall_ns = self._cpu_start_s, self._wall_start_ns
        self._task = asyncio.get_running_loop().create_task(self._probe())

    async def _probe(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self._interval_s)
            ready = loop.create_future()
            scheduled_ns = self._clock_ns()
            # The probe may be cancelled (the level ended) before this callback runs.
            loop.call_soon(_resolve, ready)
            await ready
            self._lags_ns.append(self._clock_ns() - scheduled_ns)

    async def stop(self) -> SelfWatchSummary:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        wall_s = (self._clock_ns() - self._wall_start_ns) / 1e9
        cpu_s = time.process_time() - self._cpu_start_s
        return watch_summary(self._lags_ns, cpu_s, wall_s)


def watch_summary(lags_ns: list[int], cpu_s: float, wall_s: float) -> SelfWatchSummary:
    """A level's loop-lag samples and CPU seconds over its wall seconds, summarized (the
    asyncio and the Locust engines' workers alike)."""
    lags_s = np.asarray(lags_ns or [0], dtype=float) / 1e9
    return SelfWatchSummary(
        loop_lag_p50_s=float(np.quantile(lags_s, 0.5)),
        loop_lag_p99_s=float(np.quantile(lags_s, 0.99)),
        loop_lag_max_s=float(lags_s.max()),
        lag_samples=len(lags_ns),
        cpu_fraction=cpu_s / wall_s if wall_s > 0 else 0.0,
        wall_s=wall_s,
    )
