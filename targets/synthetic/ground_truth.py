"""What the synthetic server actually did, per response id, for clients to check against.

Times are the server's ``clock_ns`` (``time.monotonic_ns`` by default, which on Linux is
one clock for every process on the host), so a client on the same host can subtract its
own arrival times from ``chunk_write_ns`` directly: the difference is the client's
measurement error plus the loopback transfer.
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class GroundTruthRecord:
    """One response's true timeline; filled in while the response is being written.

    ``chunk_write_ns[i]`` is taken right before the i-th chunk carrying >= 1 generated
    token is written (aiohttp passes it to the socket synchronously, so no client can
    read it earlier) (role-only, usage-only, malformed and [DONE] events are not
    listed), ``chunk_tokens[i]`` is how many tokens it carried. ``max_lag_ns`` is the
    largest (write start - deadline) over those chunks: the server's own scheduling lag.
    ``received_ns`` is when its first bytes were read (first_bytes.py; the handler's
    start where that is unknown): the server's parsing and dispatch after it are the
    server's own time. ``body_read_ns`` is when its body had been read whole.
    ``dequeued_ns`` is when the request left the stream queue (``max_concurrent_streams``)
    and its delays began: ``received_ns`` plus the queue wait, None while it still waits.
    ``status`` is waiting (for a stream slot), running, ok, error, truncated or cancelled
    (the client went away).
    """

    id: str
    stream: bool
    received_ns: int
    prompt_tokens: int
    fault: str | None
    fault_chunk: int | None
    status: str = "waiting"
    body_read_ns: int | None = None
    dequeued_ns: int | None = None
    done_ns: int | None = None
    max_lag_ns: int = 0
    # array('q') rather than list: 8 bytes an entry, not ~36, with max_records kept around.
    chunk_write_ns: array = field(default_factory=lambda: array("q"))
    chunk_tokens: array = field(default_factory=lambda: array("q"))

    @property
    def queue_wait_ns(self) -> int | None:
        """Time spent waiting for a stream slot; None while still waiting."""
        return None if self.dequeued_ns is None else self.dequeued_ns - self.received_ns

    def to_json(self) -> dict[str, Any]:
        """The record as a JSON-ready dict (the shape served by /ground_truth)."""
        return {
            "id": self.id,
            "stream": self.stream,
            "status": self.status,
            "received_ns": self.received_ns,
            "body_read_ns": self.body_read_ns,
            "dequeued_ns": self.dequeued_ns,
            "queue_wait_ns": self.queue_wait_ns,
            "chunk_write_ns": self.chunk_write_ns.tolist(),
            "chunk_tokens": self.chunk_tokens.tolist(),
            "done_ns": self.done_ns,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": sum(self.chunk_tokens),
            "fault": self.fault,
            "fault_chunk": self.fault_chunk,
            "max_lag_ns": self.max_lag_ns,
        }


class GroundTruthStore:
    """The latest ``max_records`` records by response id; the oldest are dropped first."""

    def __init__(self, max_records: int) -> None:
        self._max_records = max_records
        self._records: OrderedDict[str, GroundTruthRecord] = OrderedDict()

    def add(self, record: GroundTruthRecord) -> None:
        """Keep ``record`` (already being filled in), evicting the oldest if full."""
        self._records[record.id] = record
        while len(self._records) > self._max_records:
            self._records.popitem(last=False)

    def get(self, response_id: str) -> GroundTruthRecord | None:
        """The record for ``response_id``, or None if unknown or already dropped."""
        return self._records.get(response_id)

    def query(self, ids: Iterable[str]) -> dict[str, Any]:
        """``{"records": {id: record}, "missing": [ids not kept]}`` for the ids asked."""
        records: dict[str, Any] = {}
        missing: list[str] = []
        for response_id in ids:
            record = self._records.get(response_id)
            if record is None:
                missing.append(response_id)
            else:
                records[response_id] = record.to_json()
        return {"records": records, "missing": missing}

    def __len__(self) -> int:
        return len(self._records)
