"""A Locust worker watching itself during a level, as the asyncio workers do
(suites/serving/load/selfwatch.py): the gevent loop's lag, probed the way it hurts
measurements (how long a callback made ready now waits before the hub runs it), and the
process's CPU use. The same SelfWatchSummary, so the same client-bound rules apply."""

from __future__ import annotations

import time

import gevent
import gevent.event

from moeperf.collectors.serving_records import SelfWatchSummary
from moeperf.suites.serving.load.selfwatch import watch_summary

PROBE_INTERVAL_S = 0.01


class GeventSelfWatch:
    def __init__(self, interval_s: float = PROBE_INTERVAL_S):
        self._interval_s = interval_s
        self._lags_ns: list[int] = []
        self._greenlet: gevent.Greenlet | None = None
        self._cpu_start_s = 0.0
        self._wall_start_ns = 0

    def start(self) -> None:
        self._lags_ns = []
        self._cpu_start_s = time.process_time()
        self._wall_start_ns = time.monotonic_ns()
        self._greenlet = gevent.spawn(self._probe)

    def _probe(self) -> None:
        loop = gevent.get_hub().loop
        while True:
            gevent.sleep(self._interval_s)
            ready = gevent.event.Event()
            scheduled_ns = time.monotonic_ns()
            loop.run_callback(ready.set)
            ready.wait()
            self._lags_ns.append(time.monotonic_ns() - scheduled_ns)

    def stop(self) -> SelfWatchSummary:
        if self._greenlet is not None:
            self._greenlet.kill()
        wall_s = (time.monotonic_ns() - self._wall_start_ns) / 1e9
        return watch_summary(self._lags_ns, time.process_time() - self._cpu_start_s, wall_s)
