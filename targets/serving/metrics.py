"""The reference target's Prometheus metrics, in a registry passed in per app.

Two sources. The engine's state and totals (``EngineStats``) are read when /metrics is
scraped, by a custom collector, so they are one consistent snapshot and cost nothing
per step. Latencies and request outcomes are seen only by the HTTP server, which observes
them as it streams.

The names are a contract: the harness's scraper reads the ``reference_`` dialect
(``collectors.sources.target_dialects.REFERENCE_CONTRACT``). Counters are exposed with ``_total``;
units are in the names; labels are bounded (layer and expert indices, draft positions,
three statuses).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from moeperf.targets.serving.engine.api import EngineStats

# Outcome of a generation request (reference_requests_total{status}):
# ok: finished by a stop condition or max_tokens; abort: the client went away first;
# error: refused (bad request, unknown model, full queue) or failed.
STATUSES = ("ok", "abort", "error")

# Seconds. 1 ms steps to 20 ms (a tiny model's decode step is a few ms, and MTP divides a
# step's gap over its tokens), then coarser out to the 10-minute requests of long runs.
LATENCY_BUCKETS_S = (
    0.00025,
    0.0005,
    *(ms / 1000 for ms in range(1, 21)),
    *(0.025, 0.03, 0.035, 0.04, 0.045, 0.05, 0.06, 0.07, 0.08, 0.09),
    *(0.1, 0.125, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75),
    *(1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0),
)


class EngineStatsCollector(Collector):
    """Gauges and counters of the engine, read from one ``EngineStats`` per scrape."""

    def __init__(self, stats: Callable[[], EngineStats]) -> None:
        self._stats = stats

    def describe(self) -> Iterator[Metric]:
        # Names only (for the registry's clash check): no engine call at registration.
        yield from self._families(None)

    def collect(self) -> Iterator[Metric]:
        yield from self._families(self._stats())

    def _families(self, s: EngineStats | None) -> Iterator[Metric]:
        def gauge(name: str, doc: str, value: Callable[[EngineStats], float]) -> Metric:
            family = GaugeMetricFamily(name, doc)
            if s is not None:
                family.add_metric([], value(s))
            return family

        def counter(name: str, doc: str, value: Callable[[EngineStats], float]) -> Metric:
            family = CounterMetricFamily(name, doc)
            if s is not None:
                family.add_metric([], value(s))
            return family

        yield gauge(
            "reference_kv_cache_usage_ratio",
            "Fraction of KV-cache blocks in use (0 to 1).",
            lambda s: s.kv_usage_ratio,
        )
        yield gauge(
            "reference_kv_cache_blocks",
            "KV-cache blocks the engine has in all.",
            lambda s: s.kv_blocks_total,
        )
        yield gauge(
            "reference_kv_cache_used_bytes",
            "Bytes of the KV-cache blocks in use (keys and values of every attention layer, "
            "and the MTP hidden states).",
            lambda s: s.kv_bytes_used,
        )
        yield gauge(
            "reference_linear_state_used_bytes",
            "Bytes of linear-attention state held by running requests (a hybrid model's "
            "conv and recurrent state; fixed per request, whatever its context).",
            lambda s: s.linear_state_bytes_used,
        )
        prefix = GaugeMetricFamily(
            "reference_prefix_caching_enabled",
            "1 when the prefix cache is on; 0 with the reason it is off.",
            labels=["reason"],
        )
        if s is not None:
            off = s.prefix_caching_off_reason
            prefix.add_metric([off or ""], 0.0 if off else 1.0)
        yield prefix
        yield gauge(
            "reference_requests_running", "Requests in the running batch.", lambda s: s.running
        )
        yield gauge(
            "reference_requests_waiting",
            "Requests queued for admission (preempted ones included).",
            lambda s: s.waiting,
        )
        for name, doc, field in _COUNTERS:
            yield counter(name, doc, operator.attrgetter(f"counters.{field}"))

        accepted = CounterMetricFamily(
            "reference_spec_decode_accepted_tokens_per_position",
            "Draft tokens accepted, by their position in the draft (0: first).",
            labels=["position"],
        )
        experts = CounterMetricFamily(
            "reference_expert_tokens",
            "Tokens routed to each expert of each MoE layer (each token counts top_k times).",
            labels=["layer", "expert"],
        )
        if s is not None:
            for position, count in enumerate(s.counters.spec_decode_accepted_per_position):
                accepted.add_metric([str(position)], count)
            for layer, per_expert in enumerate(s.counters.expert_tokens):
                for expert, count in enumerate(per_expert):
                    experts.add_metric([str(layer), str(expert)], count)
        yield accepted
        yield experts


# (exposition name without _total, help, EngineCounters field)
_COUNTERS = (
    ("reference_steps", "Engine steps run.", "steps"),
    (
        "reference_prefill_tokens",
        "Prompt tokens computed (prefix-cache hits excluded, recomputation included).",
        "prefill_tokens",
    ),
    (
        "reference_decode_tokens",
        "Tokens fed to decode steps (draft tokens being verified included).",
        "decode_tokens",
    ),
    ("reference_prompt_tokens", "Prompt tokens of admitted requests.", "prompt_tokens"),
    ("reference_generation_tokens", "Tokens generated into outputs.", "generation_tokens"),
    ("reference_preemptions", "Requests preempted (to be recomputed later).", "preemptions"),
    (
        "reference_prefix_cache_queries",
        "Prompt tokens looked up in the prefix cache (tokens, as vLLM counts).",
        "prefix_cache_queries",
    ),
    (
        "reference_prefix_cache_hits",
        "Prompt tokens found in the prefix cache.",
        "prefix_cache_hits",
    ),
    (
        "reference_spec_decode_num_drafts",
        "Draft rounds (one per request per speculative step).",
        "spec_decode_drafts",
    ),
    (
        "reference_spec_decode_draft_tokens",
        "Draft tokens proposed by the MTP module.",
        "spec_decode_draft_tokens",
    ),
    (
        "reference_spec_decode_accepted_tokens",
        "Draft tokens accepted by verification.",
        "spec_decode_accepted_tokens",
    ),
)


class ReferenceMetrics:
    """Everything /metrics exposes: the engine's collector plus the server's own series."""

    def __init__(
        self, stats: Callable[[], EngineStats], registry: CollectorRegistry | None = None
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.registry.register(EngineStatsCollector(stats))
        self.requests = Counter(
            "reference_requests",
            "Generation requests answered, by outcome (ok, abort, error).",
            ["status"],
            registry=self.registry,
        )
        self.ttft = Histogram(
            "reference_time_to_first_token_seconds",
            "Request received to its first generated token leaving the engine.",
            buckets=LATENCY_BUCKETS_S,
            registry=self.registry,
        )
        self.itl = Histogram(
            "reference_inter_token_latency_seconds",
            "Gap between a request's engine outputs, divided over the tokens of the later one.",
            buckets=LATENCY_BUCKETS_S,
            registry=self.registry,
        )
        self.e2e = Histogram(
            "reference_e2e_request_latency_seconds",
            "Request received to its last token, for requests that finished (status ok).",
            buckets=LATENCY_BUCKETS_S,
            registry=self.registry,
        )
        self.prefix_cache_resets = Counter(
            "reference_prefix_cache_resets",
            "Prefix-cache resets applied (POST /reset_prefix_cache).",
            registry=self.registry,
        )
        # Touch every status so each series is exported from the start, at 0.
        for status in STATUSES:
            self.requests.labels(status)
