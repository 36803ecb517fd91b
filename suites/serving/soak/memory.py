"""The target's resident memory, read on a thread while a soak level runs.

Each read sums the RSS of the target's process and of all its descendants (an engine that
forks workers holds memory there) and is stored at once (memory.jsonl, through the run's
writer), so a run cut short keeps every sample it took. RSS, not USS: it is what the
kernel charges the process for and what an OOM killer looks at; shared library pages are
in it, but they do not grow with time, so they move the level, not the slope.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from moeperf.collectors.soak_records import MemorySample
from moeperf.collectors.sources.process_source import tree_rss

ClockNs = Callable[[], int]


class MemoryWatch:
    """Reads ``pid()``'s process tree every ``interval_s`` between ``start`` and ``finish``.

    ``pid`` is asked at every read (a restarted target has a new one); ``store`` receives
    each sample as it is taken, on the watch's thread.
    """

    def __init__(
        self,
        pid: Callable[[], int],
        interval_s: float,
        anchor_ns: int,
        store: Callable[[MemorySample], None],
        clock_ns: ClockNs = time.monotonic_ns,
    ):
        self._pid = pid
        self._interval_s = interval_s
        self._anchor_ns = anchor_ns
        self._store = store
        self._clock_ns = clock_ns
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.samples: list[MemorySample] = []
        self.errors = 0  # reads of a process that was gone

    def start(self, scenario: str) -> None:
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._loop, args=(scenario,), name="soak-memory", daemon=True
        )
        self._thread.start()

    def finish(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _loop(self, scenario: str) -> None:
        next_ns = self._clock_ns()
        while not self._stop.is_set():
            self.read(scenario)
            # On a fixed grid, so a slow read does not stretch the interval.
            next_ns += round(self._interval_s * 1e9)
            self._stop.wait(max(0.0, (next_ns - self._clock_ns()) / 1e9))

    def read(self, scenario: str) -> MemorySample | None:
        pid = self._pid()
        read = tree_rss(pid)
        if read is None:
            self.errors += 1
            return None
        rss, processes = read
        sample = MemorySample(self._clock_ns() - self._anchor_ns, rss, processes, pid, scenario)
        self.samples.append(sample)
        self._store(sample)
        return sample
