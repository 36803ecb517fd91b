"""load.stop_over_saturated's live check (suites/serving/saturation_watch.py): a level's
records replayed in the order they end into the watch, checked as the parent checks them,
on queues whose answer is known (tests/unit/test_saturation.py's: 4 slots of 0.25 s, a
capacity of 16 requests/s, Poisson arrivals, the first second warm-up)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from test_saturation import NS, queue_level

from moeperf.collectors.records import RequestRecord
from moeperf.suites.serving.load.plan import LevelPlan
from moeperf.suites.serving.saturation_watch import (
    CHECK_INTERVAL_S,
    IN_A_ROW,
    MIN_MEASURED_S,
    SaturationWatch,
    Stopped,
)

SECONDS = 10.0


def watched(rate: float, seed: int) -> tuple[SaturationWatch, list[RequestRecord]]:
    """A queue level's watch, as its plan makes it, and its records in the order they end."""
    level = queue_level(rate, servers=4, service_s=0.25, seconds=SECONDS, seed=seed)
    plan = LevelPlan(
        scenario="rate", mode="poisson", start_ns=0, duration_s=SECONDS, warmup_s=1.0,
        cooldown_s=0.0, drain_timeout_s=10.0, concurrency=0,
        arrivals_s=tuple(level["intended_send_ns"] / NS),
    )  # fmt: skip
    rows: list[dict[str, Any]] = [
        {str(k): v for k, v in r.items()} for r in level.to_dict("records")
    ]
    records = sorted(
        (RequestRecord(request_id=str(i), scenario="rate", worker=0,
                       last_token_ns=row["done_ns"], **row)
         for i, row in enumerate(rows)),
        key=lambda record: record.done_ns,
    )  # fmt: skip
    return SaturationWatch.of({0: plan}, anchor_ns=0), records


def replay(rate: float, seed: int) -> Stopped | None:
    """The level's records fed to the watch as they end, the watch asked every 0.1 s (the
    parent's tick) and at every end; the first stop, or None if the level ran its length."""
    watch, records = watched(rate, seed)
    ticks = [int(t * NS) for t in np.arange(0, SECONDS, 0.1)]
    events: list[tuple[int, RequestRecord | None]] = sorted(
        [*((t, None) for t in ticks), *((r.done_ns, r) for r in records)],
        key=lambda event: event[0],
    )
    for now_ns, record in events:
        if now_ns > SECONDS * NS:
            break
        if record is not None:
            watch.add(record)
        if (stopped := watch.due(now_ns)) is not None:
            return stopped
    return None


@pytest.mark.parametrize("seed", range(10))
def test_a_level_at_06_of_the_capacity_runs_its_length(seed):
    assert replay(9.6, seed) is None


@pytest.mark.parametrize("seed", range(10))
def test_a_level_at_15_of_the_capacity_is_stopped_with_its_evidence(seed):
    stopped = replay(24.0, seed)
    assert stopped is not None
    # No check before the measured window's first MIN_MEASURED_S, then one per interval,
    # the stop at the IN_A_ROW-th over-saturated one in a row.
    assert stopped.after_s >= 1.0 + MIN_MEASURED_S + (IN_A_ROW - 1) * CHECK_INTERVAL_S
    assert stopped.after_s < 0.75 * SECONDS
    signs = stopped.signs
    assert signs.over_saturated and signs.in_flight.rising and signs.ttft.rising
    assert signs.completions_per_s == pytest.approx(16.0, rel=0.2)  # the capacity
    assert signs.arrivals_per_s == pytest.approx(24.0, rel=0.25)
    assert "over-saturated (load.stop_over_saturated)" in stopped.text("rate=24")


def test_no_check_once_the_level_has_stopped_sending():
    # Every record of an over-saturated level, first given after its planned end: what is
    # left then only drains, and a stop there would cancel the drain, not a queue.
    watch, records = watched(24.0, seed=0)
    for record in records:
        watch.add(record)
    after_end_ns = int(SECONDS * NS)
    assert all(watch.due(after_end_ns + k * NS) is None for k in range(IN_A_ROW + 2))
