"""A local target's process tree through psutil: resident memory and CPU, for CPU-only runs.

The tree is the target's process and all its descendants (an engine that forks workers holds
memory and burns CPU there). RSS, not USS: it is what the kernel charges the process for and
what an OOM killer looks at.

``cpu_ratio`` is CPU seconds (user + system) of the tree over the wall seconds since the last
read: 1.0 is one core busy the whole time, so it exceeds 1 on several cores. Per process, it
counts the CPU time added since that process's last read; a process that started since then
counts all its CPU time, and one that ended since then loses its last interval (psutil cannot
read a process that is gone). The first read has no interval: None.

Finding the descendants is the read's dear part: psutil lists them by reading every process's
/proc/<pid>/stat on the host. So the tree is listed again only every ``TREE_REFRESH_S`` (and
whenever the target's pid changes); in between, the known processes are read. A child that
started since the last listing is missed until the next one (at most ``TREE_REFRESH_S``):
its RSS is absent for those reads, and its CPU is not lost, since a process's first read
counts all of it. Measured by ``tox -e bench-telemetry``.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

import psutil

from moeperf.collectors.accel_records import DeviceSample

ClockNs = Callable[[], int]

# How often the tree's descendants are listed again (module docstring).
TREE_REFRESH_S = 1.0


def _tree(pid: int) -> list[psutil.Process] | None:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return None


def tree_rss(pid: int) -> tuple[int, int] | None:
    """(RSS bytes of ``pid`` and its descendants, how many processes); None when ``pid``
    is gone. A child that exits between the listing and its read is skipped."""
    processes = _tree(pid)
    if processes is None:
        return None
    try:
        total = processes[0].memory_info().rss
    except psutil.Error:
        return None
    counted = 1
    for child in processes[1:]:
        try:
            total += child.memory_info().rss
            counted += 1
        except psutil.Error:
            continue
    return total, counted


@dataclass(frozen=True, slots=True)
class _ProcessRead:
    key: tuple[int, float]  # (pid, create time): a reused pid is another process
    rss_bytes: int
    cpu_s: float


def _read_process(p: psutil.Process) -> _ProcessRead | None:
    try:
        with p.oneshot():
            times = p.cpu_times()
            return _ProcessRead(
                (p.pid, p.create_time()), p.memory_info().rss, times.user + times.system
            )
    except psutil.Error:
        return None


class ProcessSource:
    """Reads ``pid()``'s process tree; ``pid`` is asked at every read (a restarted target
    has a new one). Raises ``ProcessLookupError`` when the target's process is gone."""

    def __init__(
        self,
        pid: Callable[[], int],
        host: str | None = None,
        clock_ns: ClockNs = time.monotonic_ns,
    ):
        self._pid = pid
        self.host = host or socket.gethostname()
        self._clock_ns = clock_ns
        self._last_cpu_s: dict[tuple[int, float], float] = {}
        self._last_ns: int | None = None
        self._tree: list[psutil.Process] | None = None  # the last listing, root first
        self._tree_ns: int | None = None  # when it was listed

    def _processes(self, pid: int, now_ns: int) -> list[psutil.Process] | None:
        """The root and its descendants: the last listing while it is fresh and of ``pid``."""
        fresh = (
            self._tree is not None
            and self._tree_ns is not None
            and self._tree[0].pid == pid
            and now_ns - self._tree_ns < TREE_REFRESH_S * 1e9
        )
        if not fresh:
            self._tree, self._tree_ns = _tree(pid), now_ns
        return self._tree

    @property
    def name(self) -> str:
        return "process"

    def read(self, t_ns: int, scenario: str) -> list[DeviceSample]:
        pid = self._pid()
        processes = self._processes(pid, self._clock_ns())
        reads = [r for r in map(_read_process, processes or []) if r is not None]
        if not processes or not reads or reads[0].key[0] != pid:
            self._tree = None  # listed again at the next read
            raise ProcessLookupError(f"process {pid} is gone")
        now_ns = self._clock_ns()
        cpu_ratio = None
        if self._last_ns is not None and now_ns > self._last_ns:
            added_s = sum(max(0.0, r.cpu_s - self._last_cpu_s.get(r.key, 0.0)) for r in reads)
            cpu_ratio = added_s / ((now_ns - self._last_ns) / 1e9)
        self._last_cpu_s = {r.key: r.cpu_s for r in reads}
        self._last_ns = now_ns
        try:
            name: str | None = processes[0].name()
        except psutil.Error:
            name = None
        return [
            DeviceSample(
                t_ns=t_ns,
                source="process",
                device=f"pid:{pid}",
                name=name,
                host=self.host,
                cpu_ratio=cpu_ratio,
                rss_bytes=sum(r.rss_bytes for r in reads),
                scenario=scenario,
            )
        ]

    def close(self) -> None:
        pass
