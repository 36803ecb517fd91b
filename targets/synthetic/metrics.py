"""The synthetic server's own Prometheus metrics, in a registry passed in per app.

A registry per app (not prometheus_client's global one) lets several servers live in one
process, as they do in tests, without their counters mixing.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from moeperf.targets.synthetic.plan import FAULTS
from moeperf.targets.synthetic.slots import StreamSlots

# Outcome of a generation request: the bounded label set of synthetic_requests_total.
# ok: answered in full (with a stall or a malformed event, if that was its fault);
# error: the injected HTTP 500; invalid: HTTP 400/404; truncated: the injected early close;
# cancelled: the client went away first.
STATUSES = ("ok", "error", "invalid", "truncated", "cancelled")


class SyntheticMetrics:
    """Counters and gauges of one synthetic server; the gauges read ``slots`` when scraped."""

    def __init__(self, registry: CollectorRegistry, slots: StreamSlots) -> None:
        self.registry = registry
        self.requests = Counter(
            "synthetic_requests",
            "Generation requests finished, by outcome.",
            ["status"],
            registry=registry,
        )
        self.generation_tokens = Counter(
            "synthetic_generation_tokens",
            "Generated tokens written to clients.",
            registry=registry,
        )
        self.prompt_tokens = Counter(
            "synthetic_prompt_tokens",
            "Prompt tokens of accepted generation requests.",
            registry=registry,
        )
        self.faults = Counter(
            "synthetic_faults",
            "Requests given an injected fault, by fault.",
            ["fault"],
            registry=registry,
        )
        # Read from the slots at scrape time, so no code path can leave them off by one.
        self.running = Gauge(
            "synthetic_requests_running",
            "Generation requests holding a stream slot (being answered) now.",
            registry=registry,
        )
        self.running.set_function(lambda: slots.running)
        self.waiting = Gauge(
            "synthetic_requests_waiting",
            "Generation requests queued for a stream slot (max_concurrent_streams) now.",
            registry=registry,
        )
        self.waiting.set_function(lambda: slots.waiting)
        self.max_streams = Gauge(
            "synthetic_max_concurrent_streams",
            "Stream slots: requests answered at once at most (0: no limit).",
            registry=registry,
        )
        self.max_streams.set(slots.limit)
        # Touch every label so each series is exported from the start, at 0.
        for status in STATUSES:
            self.requests.labels(status)
        for fault in FAULTS:
            self.faults.labels(fault)
