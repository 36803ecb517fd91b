"""The client's latency figures beside the target's own histograms, one row per figure
(the definitions: ``collectors.server_latency``). Apart from that module because it reads
the client's ``LatencySummary``, and ``serving_records`` holds ``TargetCounters``, which
holds ``ServerLatency``.
"""

from __future__ import annotations

from dataclasses import dataclass

from moeperf.collectors.server_latency import BucketEstimate, ServerLatency
from moeperf.collectors.serving_records import LatencySummary


@dataclass(frozen=True, slots=True)
class Comparison:
    """One of the client's figures beside the target's own for the same span."""

    label: str
    client_s: float | None  # None: the client has no such figure
    server_s: float | None
    server_bucket: BucketEstimate | None  # the bucket the server's figure is estimated in
    exact: bool = False  # the server's figure is its sum / count, not from buckets


def comparisons(latency: LatencySummary, server: ServerLatency) -> tuple[Comparison, ...]:
    """The client's figures (``latency``, raw samples) beside the target's histograms: TTFT
    from send (the client's own queueing left out), inter-chunk gaps against vLLM's
    per-step ITL, E2E, and the target's queue time (no client figure). A histogram the
    target does not export gives no row."""
    rows: list[Comparison] = []
    ttft, itl, e2e, queue = server.ttft_s, server.itl_s, server.e2e_s, server.queue_s
    client_ttft = latency.ttft_from_send_s
    if ttft is not None:
        rows += [
            _quantile("TTFT p50", client_ttft.value_at(0.5), ttft.p50),
            _quantile("TTFT p99", client_ttft.value_at(0.99), ttft.p99),
            Comparison("TTFT mean", client_ttft.mean, ttft.mean_s, None, exact=True),
        ]
    if itl is not None:
        rows.append(_quantile("ITL p50 (client: between chunks)", latency.icl_s.value_at(0.5),
                              itl.p50))  # fmt: skip
    if e2e is not None:
        rows.append(_quantile("E2E p50", latency.e2e_s.value_at(0.5), e2e.p50))
    if queue is not None:
        rows.append(Comparison("queue mean (server only)", None, queue.mean_s, None, exact=True))
    return tuple(rows)


def _quantile(label: str, client_s: float | None, server: BucketEstimate | None) -> Comparison:
    return Comparison(label, client_s, None if server is None else server.value_s, server)
