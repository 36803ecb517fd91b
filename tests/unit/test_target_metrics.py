"""Dialect adapters read real-shaped /metrics pages into canonical series; counter windows."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from moeperf.collectors.export import metric_names as mn
from moeperf.collectors.export.metric_names import (
    TARGET_ACCEPT_LENGTH,
    TARGET_FINISHED_REQUESTS,
    TARGET_GENERATION_TOKENS,
    TARGET_PREFIX_HIT_RATIO,
    TARGET_PROMPT_TOKENS,
)
from moeperf.collectors.sources.counter_window import CounterWindow, combine_copies
from moeperf.collectors.sources.target_dialects import (
    REFERENCE_CONTRACT,
    TARGET_ACCEPTED_PER_POSITION,
    TARGET_DRAFTS,
    TARGET_ENGINE_STEPS,
    TARGET_KV_BLOCK_TOKENS,
    TARGET_PREEMPTIONS,
    TARGET_PROCESS_RSS,
    TARGET_SERVER_TTFT,
)
from moeperf.collectors.sources.target_metrics import (
    ExpositionError,
    TargetSample,
    canonical_samples,
    detect_dialect,
    parse_exposition,
    read_exposition,
)
from moeperf.targets.serving.engine.api import EngineCounters, EngineStats
from moeperf.targets.serving.metrics import ReferenceMetrics
from moeperf.targets.synthetic.metrics import SyntheticMetrics
from moeperf.targets.synthetic.slots import StreamSlots

# vLLM 0.10 (V1 engine, two data-parallel engines): old and new names side by side,
# counters with _total, histograms, info metrics, and the process/python collectors.
VLLM_V1 = """\
# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 12345.0
# HELP process_resident_memory_bytes Resident memory size in bytes.
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 2.1e+09
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="MODEL"} 7.0
vllm:num_requests_running{engine="1",model_name="MODEL"} 5.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="MODEL"} 2.0
vllm:num_requests_waiting{engine="1",model_name="MODEL"} 0.0
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="0",model_name="MODEL"} 0.5
vllm:gpu_cache_usage_perc{engine="1",model_name="MODEL"} 0.25
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="MODEL"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="MODEL"} 0.25
# HELP vllm:gpu_prefix_cache_queries_total GPU prefix cache queries, in terms of tokens.
# TYPE vllm:gpu_prefix_cache_queries_total counter
vllm:gpu_prefix_cache_queries_total{engine="0",model_name="MODEL"} 1000.0
vllm:gpu_prefix_cache_queries_total{engine="1",model_name="MODEL"} 600.0
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="MODEL"} 1000.0
vllm:prefix_cache_queries_total{engine="1",model_name="MODEL"} 600.0
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="MODEL"} 250.0
vllm:prefix_cache_hits_total{engine="1",model_name="MODEL"} 150.0
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="MODEL"} 3.0
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="MODEL"} 50000.0
vllm:prompt_tokens_total{engine="1",model_name="MODEL"} 30000.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="MODEL"} 12000.0
vllm:generation_tokens_total{engine="1",model_name="MODEL"} 8000.0
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="MODEL"} 40.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="MODEL"} 9.0
vllm:request_success_total{engine="0",finished_reason="abort",model_name="MODEL"} 1.0
vllm:request_success_total{engine="1",finished_reason="stop",model_name="MODEL"} 30.0
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="MODEL"} 500.0
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="MODEL"} 1500.0
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="MODEL"} 900.0
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="MODEL",position="0"} 450.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_sum{engine="0",model_name="MODEL"} 12.5
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="MODEL"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="MODEL"} 20.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="MODEL"} 50.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="MODEL"} 50.0
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",enable_prefix_caching="True",engine="0"} 1.0
""".replace("MODEL", "Qwen/Qwen3-30B-A3B")

# vLLM 0.6 (V0 engine): the hit rate is a gauge, no prefix-cache counters, no engine label.
VLLM_V0 = """\
# HELP vllm:num_requests_running Number of requests currently running on GPU.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="meta-llama/Llama-2-7b"} 3.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="meta-llama/Llama-2-7b"} 1.0
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="meta-llama/Llama-2-7b"} 0.125
# HELP vllm:gpu_prefix_cache_hit_rate GPU prefix cache block hit rate.
# TYPE vllm:gpu_prefix_cache_hit_rate gauge
vllm:gpu_prefix_cache_hit_rate{model_name="meta-llama/Llama-2-7b"} 0.4
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{model_name="meta-llama/Llama-2-7b"} 1234.0
"""

# SGLang with data parallelism (two dp ranks) and metrics from every tensor rank: tp_rank 1
# repeats tp_rank 0's scheduler state and must not be counted twice.
SGLANG = """\
# HELP sglang:prompt_tokens_total Number of prefill tokens processed.
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="deepseek-ai/DeepSeek-V3"} 8.128902e+06
# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{model_name="deepseek-ai/DeepSeek-V3"} 7.557572e+06
# HELP sglang:num_requests_total The number of processed requests.
# TYPE sglang:num_requests_total counter
sglang:num_requests_total{model_name="deepseek-ai/DeepSeek-V3"} 11228.0
# HELP sglang:token_usage The token usage
# TYPE sglang:token_usage gauge
sglang:token_usage{dp_rank="0",model_name="deepseek-ai/DeepSeek-V3",tp_rank="0"} 0.28
sglang:token_usage{dp_rank="0",model_name="deepseek-ai/DeepSeek-V3",tp_rank="1"} 0.28
sglang:token_usage{dp_rank="1",model_name="deepseek-ai/DeepSeek-V3",tp_rank="0"} 0.36
# HELP sglang:cache_hit_rate The prefix cache hit rate.
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{dp_rank="0",model_name="deepseek-ai/DeepSeek-V3",tp_rank="0"} 0.5
sglang:cache_hit_rate{dp_rank="1",model_name="deepseek-ai/DeepSeek-V3",tp_rank="0"} 0.25
# HELP sglang:spec_accept_length The average acceptance length of speculative decoding.
# TYPE sglang:spec_accept_length gauge
sglang:spec_accept_length{dp_rank="0",model_name="deepseek-ai/DeepSeek-V3",tp_rank="0"} 2.5
sglang:spec_accept_length{dp_rank="1",model_name="deepseek-ai/DeepSeek-V3",tp_rank="0"} 3.5
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{dp_rank="0",model_name="deepseek-ai/DeepSeek-V3",tp_rank="0"} 162.0
sglang:num_running_reqs{dp_rank="0",model_name="deepseek-ai/DeepSeek-V3",tp_rank="1"} 162.0
sglang:num_running_reqs{dp_rank="1",model_name="deepseek-ai/DeepSeek-V3",tp_rank="0"} 100.0
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{dp_rank="0",model_name="deepseek-ai/DeepSeek-V3",tp_rank="0"} 2826.0
sglang:num_queue_reqs{dp_rank="1",model_name="deepseek-ai/DeepSeek-V3",tp_rank="0"} 4.0
# HELP sglang:num_retracted_requests_total Requests retracted (preempted), in all.
# TYPE sglang:num_retracted_requests_total counter
sglang:num_retracted_requests_total{dp_rank="0",tp_rank="0"} 7.0
sglang:num_retracted_requests_total{dp_rank="1",tp_rank="0"} 2.0
# HELP sglang:gen_throughput The generation throughput (token/s).
# TYPE sglang:gen_throughput gauge
sglang:gen_throughput{dp_rank="0",model_name="deepseek-ai/DeepSeek-V3",tp_rank="0"} 86.5
# HELP sglang:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_sum{model_name="deepseek-ai/DeepSeek-V3"} 2.35e+06
sglang:time_to_first_token_seconds_bucket{le="0.1",model_name="deepseek-ai/DeepSeek-V3"} 6.0
sglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="deepseek-ai/DeepSeek-V3"} 11008.0
sglang:time_to_first_token_seconds_count{model_name="deepseek-ai/DeepSeek-V3"} 11008.0
"""


TTFT_BUCKET = TARGET_SERVER_TTFT.name + "_bucket"


def values(text: str) -> dict:
    """Canonical name (plus labels, where any) -> value, copies combined."""
    _, samples = read_exposition(text)
    return {
        (n if not labels else (n, labels)): v for (n, labels), v in combine_copies(samples).items()
    }


def test_vllm_v1_page_reads_new_names_once_and_combines_engines():
    assert detect_dialect(parse_exposition(VLLM_V1)) == "vllm"
    assert values(VLLM_V1) == {
        mn.TARGET_RUNNING.name: 12.0,
        mn.TARGET_WAITING.name: 2.0,
        mn.TARGET_KV_USAGE.name: pytest.approx(0.375),  # mean of the engines, not 0.75
        mn.TARGET_PREFIX_HITS.name: 400.0,
        mn.TARGET_PREFIX_QUERIES.name: 1600.0,  # gpu_prefix_cache_queries not added again
        mn.TARGET_DRAFT_TOKENS.name: 1500.0,
        mn.TARGET_ACCEPTED_TOKENS.name: 900.0,
        TARGET_DRAFTS.name: 500.0,
        (TARGET_ACCEPTED_PER_POSITION.name, (("position", "0"),)): 450.0,
        TARGET_PREEMPTIONS.name: 3.0,
        TARGET_PROMPT_TOKENS.name: 80000.0,
        TARGET_GENERATION_TOKENS.name: 20000.0,
        TARGET_FINISHED_REQUESTS.name: 80.0,  # every finished_reason, both engines
        # prometheus_client's process collector: the API server's resident memory.
        TARGET_PROCESS_RSS.name: 2.1e9,
        # cache_config_info's block_size label (it has no num_gpu_blocks: no blocks).
        TARGET_KV_BLOCK_TOKENS.name: 16.0,
        # The TTFT histogram as counters: a bucket per le, its count and its sum.
        (TTFT_BUCKET, (("le", "0.001"),)): 0.0,
        (TTFT_BUCKET, (("le", "0.1"),)): 20.0,
        (TTFT_BUCKET, (("le", "+Inf"),)): 50.0,
        TARGET_SERVER_TTFT.name + "_count": 50.0,
        TARGET_SERVER_TTFT.name + "_sum": 12.5,
    }


def test_vllm_samples_are_kept_per_engine_with_canonical_labels_only():
    _, samples = read_exposition(VLLM_V1)
    running = [s for s in samples if s.name == mn.TARGET_RUNNING.name]
    assert sorted(s.value for s in running) == [5.0, 7.0]
    assert all(s.labels == () and s.kind == "gauge" for s in running)
    assert {dict(s.source)["engine"] for s in running} == {"0", "1"}
    hits = [s for s in samples if s.name == mn.TARGET_PREFIX_HITS.name]
    assert {s.kind for s in hits} == {"counter"}


def test_vllm_v0_page_has_a_hit_rate_gauge_and_no_prefix_counters():
    got = values(VLLM_V0)
    assert got[mn.TARGET_KV_USAGE.name] == 0.125
    assert got[TARGET_PREFIX_HIT_RATIO.name] == 0.4
    assert mn.TARGET_PREFIX_HITS.name not in got
    assert mn.TARGET_PREFIX_QUERIES.name not in got


def test_untyped_vllm_counters_keep_total_and_still_map():
    text = 'vllm:prefix_cache_hits_total{engine="0"} 5\nvllm:num_requests_running 2\n'
    assert values(text) == {mn.TARGET_PREFIX_HITS.name: 5.0, mn.TARGET_RUNNING.name: 2.0}


def test_sglang_page_maps_ratios_as_gauges_and_reads_one_tensor_rank():
    assert detect_dialect(parse_exposition(SGLANG)) == "sglang"
    assert values(SGLANG) == {
        mn.TARGET_RUNNING.name: 262.0,  # dp 0 (tp 0 only) + dp 1
        mn.TARGET_WAITING.name: 2830.0,
        mn.TARGET_KV_USAGE.name: pytest.approx(0.32),
        TARGET_PREFIX_HIT_RATIO.name: pytest.approx(0.375),
        TARGET_ACCEPT_LENGTH.name: pytest.approx(3.0),
        TARGET_PREEMPTIONS.name: 9.0,  # retracted, both dp ranks
        TARGET_PROMPT_TOKENS.name: 8128902.0,
        TARGET_GENERATION_TOKENS.name: 7557572.0,
        TARGET_FINISHED_REQUESTS.name: 11228.0,
    }  # no prefix-cache or draft counters: SGLang does not export them


def test_synthetic_target_real_exposition():
    slots = StreamSlots(3)
    metrics = SyntheticMetrics(CollectorRegistry(), slots)
    metrics.requests.labels("ok").inc(4)
    metrics.requests.labels("error").inc(2)  # not finished by the common definition
    metrics.generation_tokens.inc(256)
    metrics.prompt_tokens.inc(40)

    async def scrape_with_slots_full_and_two_queued() -> str:
        for _ in range(3):
            await slots.acquire()
        queued = [asyncio.create_task(slots.acquire()) for _ in range(2)]
        await asyncio.sleep(0)  # both are in the queue now
        text = generate_latest(metrics.registry).decode()
        for task in queued:
            task.cancel()
        return text

    text = asyncio.run(scrape_with_slots_full_and_two_queued())
    assert detect_dialect(parse_exposition(text)) == "synthetic"
    assert values(text) == {
        mn.TARGET_RUNNING.name: 3.0,
        mn.TARGET_WAITING.name: 2.0,
        TARGET_FINISHED_REQUESTS.name: 4.0,
        TARGET_GENERATION_TOKENS.name: 256.0,
        TARGET_PROMPT_TOKENS.name: 40.0,
    }


def reference_exposition(expert_tokens: dict[tuple[int, int], int]) -> str:
    """What a reference engine exporting ``REFERENCE_CONTRACT`` with prometheus_client shows."""
    registry = CollectorRegistry()
    for name, (kind, labels) in REFERENCE_CONTRACT.items():
        if kind == "gauge":
            Gauge(name, name, labels, registry=registry).set(0.5)
        elif name == "reference_expert_tokens_total":
            counter = Counter(name, name, labels, registry=registry)
            for (layer, expert), n in expert_tokens.items():
                counter.labels(layer=str(layer), expert=str(expert)).inc(n)
        elif labels == ("status",):
            Counter(name, name, labels, registry=registry).labels("ok").inc(7)
        elif labels == ("position",):
            Counter(name, name, labels, registry=registry).labels("0").inc(4)
        else:
            Counter(name, name, labels, registry=registry).inc(10)
    Histogram("reference_step_seconds", "ignored", registry=registry).observe(0.1)
    return generate_latest(registry).decode()


def test_reference_contract_covers_every_target_metric():
    text = reference_exposition({(0, 0): 5, (0, 1): 3, (1, 0): 8})
    assert detect_dialect(parse_exposition(text)) == "reference"
    got = values(text)
    # The ratio gauges stand in for counters only where a target has none (SGLang).
    ratio_only = {mn.TARGET_PREFIX_HIT_RATIO.name, mn.TARGET_ACCEPT_LENGTH.name}
    expected = {m.name for m in mn.TARGET_METRICS} - ratio_only
    assert {k if isinstance(k, str) else k[0] for k in got} >= expected
    experts = mn.TARGET_EXPERT_TOKENS.name
    assert got[(experts, (("expert", "1"), ("layer", "0")))] == 3.0
    assert got[(experts, (("expert", "0"), ("layer", "1")))] == 8.0
    assert got[mn.TARGET_KV_USAGE.name] == 0.5
    assert got[TARGET_FINISHED_REQUESTS.name] == 7.0


def test_reference_server_page_carries_drafts_positions_preemptions_and_steps():
    """The reference server's own collector (targets.serving.metrics), MTP with 2 drafts."""
    counters = EngineCounters(
        steps=40,
        generation_tokens=300,
        preemptions=2,
        spec_decode_drafts=100,
        spec_decode_draft_tokens=200,
        spec_decode_accepted_tokens=90,
        spec_decode_accepted_per_position=[60, 30],
        expert_tokens=[[1, 2]],
    )
    stats = EngineStats(
        running=3, waiting=1, kv_blocks_used=16, kv_blocks_total=64, counters=counters
    )
    text = generate_latest(ReferenceMetrics(lambda: stats).registry).decode()
    assert detect_dialect(parse_exposition(text)) == "reference"
    got = values(text)
    assert got[TARGET_DRAFTS.name] == 100.0
    assert got[(TARGET_ACCEPTED_PER_POSITION.name, (("position", "0"),))] == 60.0
    assert got[(TARGET_ACCEPTED_PER_POSITION.name, (("position", "1"),))] == 30.0
    assert got[TARGET_PREEMPTIONS.name] == 2.0
    assert got[TARGET_ENGINE_STEPS.name] == 40.0
    assert got[mn.TARGET_KV_USAGE.name] == 0.25
    # The contract names every series the adapter reads, with its labels.
    contract = REFERENCE_CONTRACT["reference_spec_decode_accepted_tokens_per_position_total"]
    assert contract == ("counter", ("position",))
    assert REFERENCE_CONTRACT["reference_steps_total"] == ("counter", ())


def test_unknown_and_invalid_pages():
    assert read_exposition("") == ("unknown", [])
    text = "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 1.5\n"
    assert read_exposition(text) == ("unknown", [])
    with pytest.raises(ExpositionError, match="not Prometheus"):
        parse_exposition("<html><body>Not Found</body></html>")
    assert canonical_samples(parse_exposition(VLLM_V1), "unknown") == []


def counter(value: float, name: str = mn.TARGET_PREFIX_HITS.name, **source: str):
    return TargetSample(name, (), value, "counter", tuple(sorted(source.items())))


def window_values(window: CounterWindow, *samples: TargetSample) -> dict:
    return {w.name: (w.value, w.window_value, w.run_value) for w in window.observe(samples)}


def test_counter_window_baseline_increase_and_reset():
    window = CounterWindow()
    hits = mn.TARGET_PREFIX_HITS.name
    # What the target counted before the run is not the run's.
    assert window_values(window, counter(100.0)) == {hits: (100.0, 0.0, 0.0)}
    assert window_values(window, counter(130.0)) == {hits: (130.0, 30.0, 30.0)}
    # Lower than last: the target restarted and counted 20 since.
    assert window_values(window, counter(20.0)) == {hits: (20.0, 50.0, 50.0)}
    window.start_window()
    assert window_values(window, counter(25.0)) == {hits: (25.0, 5.0, 55.0)}
    window.reset()
    assert window_values(window, counter(40.0)) == {hits: (40.0, 0.0, 0.0)}


def test_counter_window_copies_reset_independently_and_late_series_count_from_zero():
    window = CounterWindow()
    window.observe([counter(100.0, engine="0"), counter(1000.0, engine="1")])
    # Engine 0 restarted (now 10); engine 1 went on (+50): the sum (1060) hides the reset.
    got = window_values(window, counter(10.0, engine="0"), counter(1050.0, engine="1"))
    assert got[mn.TARGET_PREFIX_HITS.name] == (1060.0, 60.0, 60.0)
    # A copy first seen after the baseline counted everything within the run.
    got = window_values(
        window, counter(10.0, engine="0"), counter(1050.0, engine="1"), counter(7.0, engine="2")
    )
    assert got[mn.TARGET_PREFIX_HITS.name] == (1067.0, 67.0, 67.0)


def test_counter_window_gauges_are_the_latest_value():
    window = CounterWindow()
    running = mn.TARGET_RUNNING.name
    window.observe([TargetSample(running, (), 4.0, "gauge")])
    window.start_window()
    got = window_values(window, TargetSample(running, (), 2.0, "gauge"))
    assert got == {running: (2.0, 2.0, 2.0)}


def test_windowed_sample_is_json_ready():
    window = CounterWindow()
    labels = (("expert", "3"), ("layer", "1"))
    sample = TargetSample(mn.TARGET_EXPERT_TOKENS.name, labels, 9.0, "counter")
    (windowed,) = window.observe([sample])
    assert windowed.to_dict() == {
        "name": mn.TARGET_EXPERT_TOKENS.name,
        "labels": {"expert": "3", "layer": "1"},
        "kind": "counter",
        "value": 9.0,
        "window_value": 0.0,
        "run_value": 0.0,
    }
