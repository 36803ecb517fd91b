"""The target's own counters over each load level, from the scrapes a run stored.

The run's scraper (``suites.serving.observe.scraper``) writes every scrape of the target's
/metrics to ``server_metrics.jsonl``, read through the dialect adapters of
``collectors.sources.target_metrics`` and windowed by ``collectors.sources.counter_window``:
canonical series, counters with ``window_value`` (their increase since the window, the load
level, began). ``level_target_counters`` turns one run's scrapes into one ``TargetCounters``
per level:

- counters (drafts, accepted tokens, preemptions, prefix-cache hits, cached prompt tokens,
  each latency-histogram bucket) are the increase over the level: the ``window_value`` of
  the level's last scrape, taken when the next level starts or the run ends, so the whole
  level is inside it. The target cannot tell warm-up and cool-down requests from measured
  ones: they are in these counts;
- gauges (KV-cache usage, blocks and bytes, linear-state bytes, running and waiting
  requests, and SGLang's hit rate and accept length) are the mean and max of the
  scrapes taken while the level ran (every ``export.scrape_interval_s``); the closing
  scrape, taken after the level drained, is left out, unless it is the level's only one
  (a level shorter than the interval): then ``gauge_scrapes`` is 0 and the gauges are that
  scrape's, the target's state right after the level.

Prefix-cache hit rate (per level): prompt tokens the target found in its prefix cache /
prompt tokens it looked up, the increase of its own counters over the level (vLLM's
``prefix_cache_hits`` / ``prefix_cache_queries``, the reference target's; SGLang's and
vLLM v0's hit-rate gauge, averaged). Cached prompt tokens (vLLM's ``prompt_tokens_cached``:
from its own cache and external ones, counted whether or not requests ask for
``prompt_tokens_details``) and their share of the prompt tokens the target counted over the
level (``prompt_tokens``). The cached share of a request is a different figure, from the
request's own usage: ``prompt_tokens_details.cached_tokens`` / ``prompt_tokens`` (per
request, per turn, and the gate's ``cached_prompt_share``).

The KV cache's size (blocks in all; vLLM's ``cache_config_info`` also its block size in
tokens and its bytes) is a gauge like the others: the same at every scrape of a target that
was not restarted, so a run shows it once. The target's latency histograms (vLLM) are
``server_latency``: defined in ``collectors.server_latency``.

Every field is None when the target does not export what it needs ("not available from
this target"); a count of 0 is a count (MTP off: no drafts).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from moeperf.collectors.export import metric_names as mn
from moeperf.collectors.server_latency import ServerHistogram, ServerLatency, server_histogram
from moeperf.collectors.sources import target_dialects as td

NOT_AVAILABLE = "not available from this target"

Key = tuple[str, tuple[tuple[str, str], ...]]  # (canonical name, sorted labels)


@dataclass(frozen=True, slots=True)
class TargetCounters:
    """What the target itself counted over one load level (None: it does not export it)."""

    dialect: str  # the /metrics dialect the scrapes were read in (reference, vllm, ...)
    # Scrapes taken while the level ran, the gauges' samples (0: only the closing one).
    gauge_scrapes: int
    # Speculative decoding (MTP). A draft is one request's speculative step.
    spec_drafts: float | None = None
    spec_draft_tokens: float | None = None
    spec_accepted_tokens: float | None = None
    spec_acceptance_ratio: float | None = None  # accepted draft tokens / draft tokens
    # Position i (first = 0): drafts whose i-th token was accepted / drafts.
    spec_acceptance_by_position: tuple[float, ...] | None = None
    # Tokens one request commits per verify step: 1 + accepted / drafts (SGLang: the mean
    # of its spec_accept_length gauge).
    spec_tokens_per_step: float | None = None
    # Engine steps (the reference engine's only) and generated tokens per step: the batch
    # the engine kept running, times what MTP adds.
    engine_steps: float | None = None
    generation_tokens: float | None = None
    generation_tokens_per_engine_step: float | None = None
    kv_usage_mean_ratio: float | None = None  # KV-cache blocks in use / total, 0 to 1
    kv_usage_max_ratio: float | None = None
    # Where the target says how many blocks it has (the reference target; vLLM's
    # cache_config_info): its total, and the blocks in use at the level's highest scrape
    # (max ratio x total).
    kv_blocks_total: float | None = None
    kv_blocks_used_max: float | None = None
    # vLLM's cache_config_info: the tokens one block holds, and the whole cache's bytes.
    kv_block_size_tokens: float | None = None
    kv_cache_bytes_total: float | None = None  # its kv_cache_memory_bytes
    # Where the target states bytes (the reference target): the highest scrape's KV bytes
    # in use, and linear-attention state bytes (a hybrid model's; 0 for full attention).
    kv_bytes_used_max: float | None = None
    linear_state_bytes_used_max: float | None = None
    # The most requests the target ran, and kept waiting, at any scrape of the level.
    running_max: float | None = None
    waiting_max: float | None = None
    preemptions: float | None = None  # requests preempted (SGLang: retracted)
    # In the target's unit (vLLM and reference: prompt tokens).
    prefix_cache_queries: float | None = None
    prefix_cache_hits: float | None = None
    # hits / queries; SGLang and vLLM v0: the mean of their hit-rate gauge.
    prefix_cache_hit_ratio: float | None = None
    # Prompt tokens the target counted, those it served from a cache (vLLM), and their share.
    prompt_tokens: float | None = None
    prompt_tokens_cached: float | None = None
    prompt_tokens_cached_ratio: float | None = None  # cached / prompt tokens
    # The target's own latency histograms over the level (vLLM; collectors.server_latency).
    server_latency: ServerLatency | None = None


def metrics_unavailable(scrapes: Iterable[Mapping[str, Any]]) -> str | None:
    """Why a run has no target counters at all: the reason the scraper gave up (e.g.
    "HTTP 404 from URL": a server without /metrics), when not one scrape was readable.
    None when some scrape was (or none was stored: scraping off)."""
    reason = None
    for scrape in scrapes:
        if scrape.get("available"):
            return None
        reason = reason or scrape.get("reason")
    return None if reason is None else str(reason)


def level_target_counters(scrapes: Iterable[Mapping[str, Any]]) -> dict[str, TargetCounters]:
    """One ``TargetCounters`` per window (load level) of a run's stored scrapes.

    ``scrapes`` are the records of server_metrics.jsonl, in any order; records of a target
    that could not be scraped, and the run's baseline scrape (no window), are skipped.
    """
    by_window: dict[str, list[Mapping[str, Any]]] = {}
    for scrape in scrapes:
        window = scrape.get("window")
        if scrape.get("available") and isinstance(window, str):
            by_window.setdefault(window, []).append(scrape)
    return {
        window: _level(sorted(records, key=lambda r: r.get("t_ns", 0)))
        for window, records in by_window.items()
    }


def _series(scrape: Mapping[str, Any]) -> dict[Key, Mapping[str, Any]]:
    return {
        (s["name"], tuple(sorted((str(k), str(v)) for k, v in s.get("labels", {}).items()))): s
        for s in scrape.get("series", [])
    }


def _ratio(part: float | None, whole: float | None) -> float | None:
    return part / whole if part is not None and whole else None


def _level(records: Sequence[Mapping[str, Any]]) -> TargetCounters:
    closing = _series(records[-1])
    during = [_series(r) for r in records[:-1]]
    gauge_scrapes = len(during)
    if not during:
        during = [closing]

    def count(metric: mn.Metric) -> float | None:
        found = closing.get((metric.name, ()))
        return float(found["window_value"]) if found is not None else None

    def gauge(metric: mn.Metric) -> list[float]:
        key = (metric.name, ())
        return [float(s[key]["value"]) for s in during if key in s]

    def mean(values: list[float]) -> float | None:
        return sum(values) / len(values) if values else None

    drafts, draft_tokens = count(td.TARGET_DRAFTS), count(mn.TARGET_DRAFT_TOKENS)
    accepted = count(mn.TARGET_ACCEPTED_TOKENS)
    per_position = sorted(
        (int(dict(labels)["position"]), float(s["window_value"]))
        for (name, labels), s in closing.items()
        if name == td.TARGET_ACCEPTED_PER_POSITION.name
        and dict(labels).get("position", "x").isdigit()
    )
    by_position = None
    if per_position and drafts:
        by_position = tuple(n / drafts for _, n in per_position)
    tokens_per_step = 1 + accepted / drafts if drafts and accepted is not None else None
    if tokens_per_step is None:
        tokens_per_step = mean(gauge(mn.TARGET_ACCEPT_LENGTH))
    steps, generated = count(td.TARGET_ENGINE_STEPS), count(mn.TARGET_GENERATION_TOKENS)
    kv = gauge(mn.TARGET_KV_USAGE)
    kv_bytes, state_bytes = gauge(td.TARGET_KV_BYTES), gauge(td.TARGET_LINEAR_STATE_BYTES)
    kv_blocks = gauge(td.TARGET_KV_BLOCKS)
    blocks_total = kv_blocks[-1] if kv_blocks else None
    running, waiting = gauge(mn.TARGET_RUNNING), gauge(mn.TARGET_WAITING)
    queries, hits = count(mn.TARGET_PREFIX_QUERIES), count(mn.TARGET_PREFIX_HITS)
    hit_ratio = _ratio(hits, queries)
    if queries is None:
        hit_ratio = mean(gauge(mn.TARGET_PREFIX_HIT_RATIO))
    prompt, cached = count(mn.TARGET_PROMPT_TOKENS), count(td.TARGET_PROMPT_TOKENS_CACHED)
    block_tokens, cache_bytes = gauge(td.TARGET_KV_BLOCK_TOKENS), gauge(td.TARGET_KV_CACHE_BYTES)
    return TargetCounters(
        dialect=str(records[-1].get("dialect", "unknown")),
        gauge_scrapes=gauge_scrapes,
        spec_drafts=drafts,
        spec_draft_tokens=draft_tokens,
        spec_accepted_tokens=accepted,
        spec_acceptance_ratio=_ratio(accepted, draft_tokens),
        spec_acceptance_by_position=by_position,
        spec_tokens_per_step=tokens_per_step,
        engine_steps=steps,
        generation_tokens=generated,
        generation_tokens_per_engine_step=_ratio(generated, steps),
        kv_usage_mean_ratio=mean(kv),
        kv_usage_max_ratio=max(kv) if kv else None,
        kv_blocks_total=blocks_total,
        kv_blocks_used_max=round(max(kv) * blocks_total) if kv and blocks_total else None,
        kv_block_size_tokens=block_tokens[-1] if block_tokens else None,
        kv_cache_bytes_total=cache_bytes[-1] if cache_bytes else None,
        kv_bytes_used_max=max(kv_bytes) if kv_bytes else None,
        linear_state_bytes_used_max=max(state_bytes) if state_bytes else None,
        running_max=max(running) if running else None,
        waiting_max=max(waiting) if waiting else None,
        preemptions=count(td.TARGET_PREEMPTIONS),
        prefix_cache_queries=queries,
        prefix_cache_hits=hits,
        prefix_cache_hit_ratio=hit_ratio,
        prompt_tokens=prompt,
        prompt_tokens_cached=cached,
        prompt_tokens_cached_ratio=_ratio(cached, prompt),
        server_latency=_server_latency(closing),
    )


def _server_latency(closing: Mapping[Key, Mapping[str, Any]]) -> ServerLatency | None:
    """The target's latency histograms over the level, from the closing scrape's bucket,
    count and sum increases; None when it has none of them."""
    found = {m.name: _histogram(closing, m.name) for m in td.SERVER_HISTOGRAMS}
    if not any(found.values()):
        return None
    return ServerLatency(
        ttft_s=found[td.TARGET_SERVER_TTFT.name],
        itl_s=found[td.TARGET_SERVER_ITL.name],
        e2e_s=found[td.TARGET_SERVER_E2E.name],
        queue_s=found[td.TARGET_SERVER_QUEUE.name],
    )


def _histogram(closing: Mapping[Key, Mapping[str, Any]], name: str) -> ServerHistogram | None:
    count, total = closing.get((name + td.COUNT, ())), closing.get((name + td.SUM, ()))
    if count is None or total is None:
        return None
    buckets = {
        float(dict(labels)["le"]): float(s["window_value"])
        for (series, labels), s in closing.items()
        if series == name + td.BUCKET and "le" in dict(labels)
    }
    return server_histogram(buckets, float(count["window_value"]), float(total["window_value"]))
