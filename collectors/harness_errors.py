"""The harness's own error per request, against a target that stamps its own times.

Stored as harness_errors.jsonl / .parquet beside the requests of a run against the
synthetic target, so that the gate compares the samples of two runs (the summary keeps
only their quantiles). The definitions are ``serving_records.MeasurementErrors``'s.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from moeperf.collectors.schema import SCHEMA_VERSION


@dataclass(frozen=True, slots=True)
class HarnessError:
    """One matched request's errors, in seconds (MeasurementErrors defines each)."""

    request_id: str
    # The load level the request belongs to ("c=64").
    scenario: str
    # Send side: the target's receipt minus the intended send.
    send_s: float
    # Receive side: the first chunk's read minus its write.
    receive_s: float
    # The client's TTFT minus the target's received-to-first-write (send + receive).
    ttft_total_s: float
    # The client's E2E minus the target's received-to-done; None where it did not say.
    e2e_total_s: float | None
    # The record layout's version (collectors/schema.py); readers refuse one they do not know.
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
