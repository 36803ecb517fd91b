"""From a drill level's request records and the faults injected, each fault's outcome and
the audit of the requests (collectors/drill_records.py defines every figure)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from moeperf.collectors.drill_records import (
    DrillSummary,
    FaultEvent,
    FaultOutcome,
    LatencyWindow,
)
from moeperf.collectors.latency import per_request
from moeperf.collectors.request_audit import audit_requests

NS_PER_S = 1_000_000_000


def summarize_drill(
    requests: pd.DataFrame,
    scenario: str,
    level_start_ns: int,
    events: Sequence[FaultEvent],
    sent_by_worker: dict[int, int],
    compare_window_s: float,
) -> DrillSummary:
    """``requests``: the level's records (one row per request id, as stored); times on
    the run's clock; ``level_start_ns`` on it too."""
    frame = requests[requests["scenario"] == scenario]
    derived = per_request(frame)
    outcomes = []
    for i, event in enumerate(events):
        next_ns = events[i + 1].injected_ns if i + 1 < len(events) else None
        outcomes.append(_outcome(frame, derived, event, next_ns, level_start_ns, compare_window_s))
    return DrillSummary(
        scenario=scenario,
        level_start_ns=level_start_ns,
        compare_window_s=compare_window_s,
        faults=tuple(outcomes),
        audit=audit_requests(frame["request_id"], sent_by_worker),
        statuses={str(k): int(v) for k, v in frame["status"].value_counts().items()},
    )


def _outcome(
    frame: pd.DataFrame,
    derived: pd.DataFrame,
    event: FaultEvent,
    next_ns: int | None,
    level_start_ns: int,
    window_s: float,
) -> FaultOutcome:
    sent = frame["send_ns"].to_numpy()
    done = frame["done_ns"].to_numpy()
    ok = (frame["status"] == "ok").to_numpy()
    # Sent at or after the injection, and ended after the fault did: a request that slipped
    # in before the fault took hold (a window opens a few ms after the harness asks for
    # it) and ended while it lasted is not a recovery from it.
    after_fault = ok & (sent >= event.injected_ns) & (done >= event.cleared_ns)
    if next_ns is not None:
        after_fault &= sent < next_ns
    recovered_ns = int(done[after_fault].min()) if after_fault.any() else None
    # Up to the recovery, and never past the next event: its failures are its own (an
    # elastic drill's events can follow one another before the level has recovered).
    ends = [t for t in (recovered_ns, next_ns) if t is not None]
    end_ns = min(ends) if ends else None
    failed = ~ok & (done >= event.injected_ns)
    if end_ns is not None:
        failed &= done <= end_ns
    window_ns = int(window_s * NS_PER_S)
    intended = frame["intended_send_ns"].to_numpy()

    def latencies(low_ns: int, high_ns: int | None) -> LatencyWindow:
        chosen = ok & (intended >= low_ns)
        if high_ns is not None:
            chosen &= intended < high_ns
        rows = derived[chosen]
        return LatencyWindow(int(chosen.sum()), _median(rows["ttft_s"]), _median(rows["e2e_s"]))

    after = (
        latencies(recovered_ns, recovered_ns + window_ns)
        if recovered_ns is not None
        else LatencyWindow(0, None, None)
    )
    return FaultOutcome(
        index=event.index,
        kind=event.kind,
        at_s=(event.injected_ns - level_start_ns) / NS_PER_S,
        fault_s=(event.cleared_ns - event.injected_ns) / NS_PER_S,
        injected=event.injected,
        detail=event.detail,
        failed=int(failed.sum()),
        failed_by_type=_counts(frame["error_type"][failed]),
        recovery_s=(
            (recovered_ns - event.injected_ns) / NS_PER_S if recovered_ns is not None else None
        ),
        before=latencies(event.injected_ns - window_ns, event.injected_ns),
        during=latencies(event.injected_ns, recovered_ns if recovered_ns is not None else next_ns),
        after=after,
        requests_hit=event.requests_hit,
    )


def _median(values: pd.Series) -> float | None:
    finite = values.dropna().to_numpy(dtype=float)
    return float(np.median(finite)) if len(finite) else None


def _counts(values: pd.Series) -> dict[str, int]:
    return {str(k): int(v) for k, v in values.fillna("none").value_counts().items()}
