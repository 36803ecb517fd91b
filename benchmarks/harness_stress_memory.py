"""The harness stress benchmark's memory measures (benchmarks/harness_stress.py): which
child processes are load workers, and their RSS and the parent's, sampled on a thread.

Apart from the benchmark's runs so the sampling (psutil, a thread, /proc) reads on its own
and its parts are tested without starting a run.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import psutil

SAMPLE_S = 0.05

ProcessKind = Literal["worker", "target", "other"]


def classify_process(cmdline: Sequence[str]) -> ProcessKind:
    """A child of the harness, by its command line: a load worker (multiprocessing's
    spawn), the embedded target, or something else (the resource tracker; a process
    between fork and exec still shows its parent's command line)."""
    text = " ".join(cmdline)
    if "spawn_main" in text:
        return "worker"
    if "moeperf.targets.synthetic" in text or "moeperf.targets.serving" in text:
        return "target"
    return "other"


@dataclass
class MemoryPeaks:
    """The largest RSS seen, in bytes: the parent's, the sum over the load workers (at one
    sample) and the largest single worker's."""

    parent: int = 0
    workers: int = 0
    worker_max: int = 0
    samples: int = 0

    def add(self, parent: int, workers: Mapping[int, int]) -> None:
        self.parent = max(self.parent, parent)
        self.workers = max(self.workers, sum(workers.values()))
        self.worker_max = max(self.worker_max, max(workers.values(), default=0))
        self.samples += 1


class RssSampler:
    """Samples the RSS of this process and of its load workers on a thread."""

    def __init__(self, interval_s: float = SAMPLE_S) -> None:
        self.interval_s = interval_s
        self.peaks = MemoryPeaks()
        self._me = psutil.Process()
        self._kinds: dict[int, ProcessKind] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="rss-sampler", daemon=True)

    def sample(self) -> tuple[int, int]:
        """One sample, added to the peaks: (parent RSS, workers' RSS summed)."""
        parent = self._me.memory_info().rss
        workers: dict[int, int] = {}
        for child in self._me.children(recursive=True):
            try:
                kind = self._kinds.get(child.pid) or classify_process(child.cmdline())
                if kind != "other":  # "other" may still exec into a worker or the target
                    self._kinds[child.pid] = kind
                if kind == "worker":
                    workers[child.pid] = child.memory_info().rss
            except psutil.Error:  # it ended between the listing and the read
                continue
        with self._lock:
            self.peaks.add(parent, workers)
        return parent, sum(workers.values())

    def _watch(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def __enter__(self) -> RssSampler:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()


def vm_hwm_bytes() -> int:
    """This process's VmHWM (its peak RSS, between samples too), bytes; 0 where unknown."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0
