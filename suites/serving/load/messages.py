"""What an asyncio load worker process tells the parent, one record per kind of message
(suites/serving/load/worker.py and level.py send them, suites/serving/load/pool.py reads
them)."""

from __future__ import annotations

from dataclasses import dataclass

from moeperf.collectors.records import RequestRecord
from moeperf.collectors.serving_records import WorkerSummary
from moeperf.suites.serving.load.engine import WorkerHealth


@dataclass(frozen=True, slots=True)
class Ready:
    """The worker has started and waits for a level."""

    worker: int


@dataclass(frozen=True, slots=True)
class Failed:
    """The worker raised: the traceback, header values redacted."""

    worker: int
    traceback: str


@dataclass(frozen=True, slots=True)
class Finished:
    """A request ended, with this status (the progress bar counts it)."""

    status: str


@dataclass(frozen=True, slots=True)
class Record:
    """A request's record, as it ended."""

    record: RequestRecord


@dataclass(frozen=True, slots=True)
class Amended:
    """A newer version of a record already sent (client-side token counts added)."""

    record: RequestRecord


@dataclass(frozen=True, slots=True)
class Health:
    """The worker's periodic health during a level."""

    health: WorkerHealth


@dataclass(frozen=True, slots=True)
class LevelDone:
    """The worker's level is over: its summary."""

    worker: int
    summary: WorkerSummary


WorkerMessage = Ready | Failed | Finished | Record | Amended | Health | LevelDone
