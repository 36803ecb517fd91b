"""The load engine protocol: what the runner asks of a pool of load workers, whichever
engine it is (asyncio worker processes, suites/serving/load/pool.py; Locust under a master,
suites/serving/locust_pool.py), and where an engine passes what a level produces."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from moeperf.collectors.records import RequestRecord
from moeperf.collectors.serving_records import WorkerSummary
from moeperf.suites.serving.load.plan import LevelPlan


@dataclass(frozen=True, slots=True)
class WorkerHealth:
    """A worker's periodic report during a level (live export)."""

    worker: int
    scenario: str
    in_flight: int
    loop_lag_p99_s: float
    cpu_ratio: float


def _ignore(_value: object) -> None:
    pass


def _nothing() -> None:
    pass


@dataclass(frozen=True)
class LevelSink:
    """Where an engine passes what a level produces, as it happens: each request's
    record, and its status as it ends (the progress bar), a tick while waiting, each
    worker's health. A record amended after the level (client-side token counts added; it
    changes counts, never how the request ended) goes to ``on_amended``, by default
    ``on_record``."""

    on_record: Callable[[RequestRecord], None]
    on_finished: Callable[[str], None] = _ignore
    on_tick: Callable[[], None] = _nothing
    on_health: Callable[[WorkerHealth], None] = _ignore
    on_amended: Callable[[RequestRecord], None] | None = None

    def amended(self, record: RequestRecord) -> None:
        (self.on_amended or self.on_record)(record)


class LoadEngine(Protocol):
    """A pool of load workers: started by its constructor, stopped by ``close``."""

    @property
    def size(self) -> int:
        """How many workers it has."""
        ...

    # A level planned now starts this much later, so every worker starts it together.
    start_delay_s: float
    # Whether its records come from other processes, maybe other hosts, merged: the runner
    # then audits them (every request sent has its one record).
    merges_records: bool

    def wait_ready(self, timeout_s: float | None = None) -> None:
        """Until every worker is ready for a level (an error if one fails first)."""
        ...

    def run_level(self, plans: dict[int, LevelPlan], sink: LevelSink) -> list[WorkerSummary]:
        """Each worker's plan of one level, run at once; its records to ``sink`` as they
        come; each worker's summary, in worker order."""
        ...

    def drain(self, sink: LevelSink, timeout_s: float = 30.0) -> None:
        """After a stop: what is in flight cancelled, every record still sent kept."""
        ...

    def drop_connections(self) -> None:
        """Every worker drops its connections under its requests in flight (a drill)."""
        ...

    def end_level(self) -> None:
        """The running level ends now, what is in flight cancelled and recorded; the run
        goes on (load.stop_over_saturated)."""
        ...

    def note(self) -> str | None:
        """What the run's notes say of the engine (None: nothing)."""
        ...

    def close(self) -> None: ...
