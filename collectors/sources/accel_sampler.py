"""Reads the accelerator sources on a thread beside the load, every ``period_s`` (100 ms).

Ticks lie on a fixed grid, tick k at start + k x period, so reads do not drift however long
each takes. A read that overruns makes the ticks whose time has passed be skipped and counted
(``ticks_missed``), never made up in a burst: the sampler is never more than one read behind,
which bounds its cost to one read in flight. Each sample is handed to ``store`` as soon as it
is read (the run writer's ``append_device_sample``), so a run cut short keeps them.

A source whose read raises is counted (``SamplerCost.errors``, by source) and read again at
the next tick; the others are read as usual. The sampler measures itself: wall and thread CPU
seconds per read (``SamplerCost``), so a run can show what watching cost.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence

from moeperf.collectors.accel_records import DeviceSample, DeviceSource, SamplerCost, SourceErrors

ClockNs = Callable[[], int]
DEFAULT_PERIOD_S = 0.1


def next_tick(start_ns: int, period_ns: int, done: int, now_ns: int) -> tuple[int, int]:
    """(the next tick to read, ticks skipped) after tick ``done`` was read, at ``now_ns``.

    The next tick is the first after ``done`` whose time has not passed; those skipped are
    the ones in between (their time passed while tick ``done`` was being read).
    """
    due_now = math.ceil((now_ns - start_ns) / period_ns)
    tick = max(done + 1, due_now)
    return tick, tick - done - 1


class DeviceSampler:
    """Reads ``sources`` every ``period_s`` between ``start()`` and ``finish()``.

    ``anchor_ns`` (on ``clock_ns``) is the run's anchor: samples carry ``t_ns`` from it.
    The sources stay open after ``finish``: whoever opened them closes them.
    """

    def __init__(
        self,
        sources: Sequence[DeviceSource],
        *,
        anchor_ns: int,
        store: Callable[[DeviceSample], None],
        period_s: float = DEFAULT_PERIOD_S,
        clock_ns: ClockNs = time.monotonic_ns,
    ):
        if not period_s > 0:
            raise ValueError(f"period_s must be > 0; got {period_s}")
        self._sources = tuple(sources)
        self._anchor_ns = anchor_ns
        self._store = store
        self.period_s = period_s
        self._period_ns = round(period_s * 1e9)
        self._clock_ns = clock_ns
        self._scenario = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started_ns: int | None = None
        self._finished_ns: int | None = None
        # The cost, kept by the sampler's thread (or whoever calls read_once).
        self._reads = 0
        self._ticks_missed = 0
        self._read_total_s = 0.0
        self._read_max_s = 0.0
        self._cpu_s = 0.0
        self._errors: dict[str, tuple[int, str]] = {}

    def set_scenario(self, name: str) -> None:
        """Label the samples from the next read on with ``name`` (a load level); "" between."""
        self._scenario = name

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("the sampler is already running")
        self._stop.clear()
        self._started_ns = self._clock_ns()
        self._finished_ns = None
        self._thread = threading.Thread(
            target=self._loop, args=(self._started_ns,), name="accel-sampler", daemon=True
        )
        self._thread.start()

    def finish(self) -> SamplerCost:
        """Stop after the read in progress (if any), read once more, and return what the
        sampling cost. The last read is after everything measured: a window that ended
        less than a period before the finish has a reading after its end, so its edge is
        interpolated (accel_figures) rather than cut at the last tick inside it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
            self.read_once()
            self._finished_ns = self._clock_ns()
        return self.cost()

    def _loop(self, start_ns: int) -> None:
        tick = 0
        while not self._stop.is_set():
            self.read_once()
            tick, skipped = next_tick(start_ns, self._period_ns, tick, self._clock_ns())
            self._ticks_missed += skipped
            wait_ns = start_ns + tick * self._period_ns - self._clock_ns()
            self._stop.wait(max(0.0, wait_ns / 1e9))

    def read_once(self) -> int:
        """Read every source now and store its samples; how many were stored."""
        wall_start, cpu_start = time.perf_counter(), time.thread_time()
        stored = 0
        scenario = self._scenario
        for source in self._sources:
            t_ns = self._clock_ns() - self._anchor_ns
            try:
                samples = source.read(t_ns, scenario)
            except Exception as exc:  # any failure of a source is data about it, not a crash
                self._count_error(source.name, exc)
                continue
            for sample in samples:
                try:
                    self._store(sample)
                    stored += 1
                except Exception as exc:  # a full disk: counted, and the sampler goes on
                    self._count_error("store", exc)
        wall_s = time.perf_counter() - wall_start
        self._cpu_s += time.thread_time() - cpu_start
        self._reads += 1
        self._read_total_s += wall_s
        self._read_max_s = max(self._read_max_s, wall_s)
        return stored

    def _count_error(self, source: str, exc: Exception) -> None:
        count, _ = self._errors.get(source, (0, ""))
        self._errors[source] = (count + 1, f"{type(exc).__name__}: {exc}")

    def cost(self) -> SamplerCost:
        """The cost so far (``run_s`` up to now while running)."""
        run_s = 0.0
        if self._started_ns is not None:
            end_ns = self._finished_ns if self._finished_ns is not None else self._clock_ns()
            run_s = (end_ns - self._started_ns) / 1e9
        reads = self._reads
        return SamplerCost(
            period_s=self.period_s,
            run_s=run_s,
            reads=reads,
            ticks_missed=self._ticks_missed,
            read_mean_s=self._read_total_s / reads if reads else None,
            read_max_s=self._read_max_s if reads else None,
            cpu_s=self._cpu_s,
            cpu_ratio=self._cpu_s / run_s if run_s > 0 else None,
            errors=tuple(SourceErrors(s, n, last) for s, (n, last) in sorted(self._errors.items())),
        )
