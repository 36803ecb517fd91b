"""How many load worker processes a serving run has: enough for the highest level it can
reach (a capacity search's max_level, a fit search's max_streams, else load.levels'), as
the run's note says."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from moeperf.suites.serving.spec import ServingSpec

# One worker process per this many streams (or requests/s open loop), up to the cores.
_STREAMS_PER_WORKER = 128
_RATE_PER_WORKER = 100.0
_LEVELS_REACH = "load.levels' highest level"


@dataclass(frozen=True, slots=True)
class WorkerSizing:
    """How many load worker processes a run has, and for what: the highest level it can
    reach (a capacity search's max_level, a fit's max_streams, else load.levels')."""

    workers: int
    reach: str  # what the highest level is: "load.levels' highest level", ...
    level: str  # that level in its unit: "64 streams", "200 requests/s"
    per_worker: str  # its share of one worker: "32 streams"
    rule: str  # how the count was chosen: load.workers, or auto's rule
    remote: int = 0  # Locust workers on other machines, beside these

    @property
    def worth_a_note(self) -> bool:
        """One worker for load.levels is every small run's: said only when it is more, or
        sized for a search."""
        return self.workers > 1 or bool(self.remote) or self.reach != _LEVELS_REACH

    def note(self) -> str:
        """The run's note on its load workers."""
        workers = f"{self.workers} load worker{'s' if self.workers > 1 else ''}"
        if self.remote:
            workers += f" on this host and {self.remote} remote"
        return (
            f"{workers}: sized for {self.reach} {self.level}, {self.per_worker} per worker "
            f"({self.rule})."
        )


def worker_sizing(spec: ServingSpec, cores: int | None = None) -> WorkerSizing:
    """The run's load workers: ``load.workers``, or with "auto" one per 128 streams (100
    requests/s open loop) of the highest level the run can reach, at least one and at
    most the usable ``cores`` (default: this process's)."""
    load = spec.load
    reaches = [(_LEVELS_REACH, load.mode, max(load.levels))]
    if spec.capacity is not None:
        reaches.append(("the search's max_level", load.mode, spec.capacity.max_level))
    if spec.sweep is not None and spec.sweep.fit is not None:  # its probes: closed loop
        reaches.append(("the fit's max_streams", "concurrency", spec.sweep.fit.max_streams))
    needs = [math.ceil(level / _per_worker(mode)) for _, mode, level in reaches]
    # The one needing most workers; of a tie, the highest level (a search's max_level).
    _, (reach, mode, top) = max(
        zip(needs, reaches, strict=True), key=lambda pair: (pair[0], pair[1][2])
    )
    if cores is None:
        affinity = hasattr(os, "sched_getaffinity")
        cores = len(os.sched_getaffinity(0)) if affinity else (os.cpu_count() or 1)
    if load.workers == "auto":
        workers = max(1, min(cores, max(needs)))
        per = _level_text(mode, _per_worker(mode))
        rule = f"load.workers = 'auto': one per {per}, at most the {cores} usable cores"
    else:
        workers = load.workers
        rule = f"load.workers = {workers}"
    remote = spec.locust.remote_workers if load.engine == "locust" else 0
    every = workers + remote
    if mode == "concurrency":  # whole streams, split evenly over the workers
        share = _level_text(mode, math.ceil(top / min(every, top)))
    else:
        share = _level_text(mode, round(top / every, 2))
    return WorkerSizing(workers, reach, _level_text(mode, top), share, rule, remote)


def worker_count(spec: ServingSpec) -> int:
    return worker_sizing(spec).workers


def _per_worker(mode: str) -> float:
    return _STREAMS_PER_WORKER if mode == "concurrency" else _RATE_PER_WORKER


def _level_text(mode: str, level: float) -> str:
    if mode == "concurrency":
        return f"{level:g} stream{'s' if level != 1 else ''}"
    if mode == "trace":
        return f"speed-up {level:g}"
    return f"{level:g} requests/s"
