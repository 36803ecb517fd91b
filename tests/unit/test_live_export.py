"""The live exporter: what a run's /metrics says, read back with prometheus_client's parser."""

import urllib.request

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from moeperf.collectors.accel_records import DeviceSample
from moeperf.collectors.export.live_export import LiveExporter, expert_imbalance
from moeperf.collectors.export.push import push_run, redact_url
from moeperf.collectors.records import RequestRecord, StepRecord
from moeperf.collectors.summary import Slo

MS = 1_000_000


def samples(exporter: LiveExporter) -> dict[tuple, float]:
    text = generate_latest(exporter.registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(exporter: LiveExporter, name: str, **labels) -> float:
    base = {"suite": "nightly", "target": "synthetic", **labels}
    return samples(exporter)[(name, tuple(sorted(base.items())))]


def ok_record(request_id="r0", ttft_ms=50, **overrides) -> RequestRecord:
    # tokens at ttft, +10 ms, and a 2-token chunk at +30 ms: 4 tokens, 3 ITL samples
    first = ttft_ms * MS
    fields = dict(
        request_id=request_id, scenario="c=4", phase="measure", worker=0,
        intended_send_ns=0, send_ns=MS, done_ns=first + 31 * MS, status="ok",
        chunk_ns=[MS, first, first + 10 * MS, first + 30 * MS], chunk_tokens=[0, 1, 1, 2],
        first_token_ns=first, last_token_ns=first + 30 * MS, output_tokens=4, prompt_tokens=9,
    )  # fmt: skip
    fields.update(overrides)
    return RequestRecord(**fields)


def test_requests_become_histograms_counters_and_goodput():
    exporter = LiveExporter("nightly", "synthetic", slo=Slo(ttft_s=0.1))
    exporter.start_level("c=4", 4)
    exporter.observe_request(ok_record("a", ttft_ms=50))
    exporter.observe_request(ok_record("b", ttft_ms=500))  # misses the TTFT SLO
    failed = RequestRecord(
        request_id="c", scenario="c=4", phase="measure", worker=0, intended_send_ns=0,
        send_ns=MS, done_ns=2 * MS, status="error", error_type="http_5xx",
    )  # fmt: skip
    exporter.observe_request(failed)

    c4 = {"scenario": "c=4"}
    assert value(exporter, "moeperf_requests_total", status="ok", **c4) == 2
    assert value(exporter, "moeperf_requests_total", status="error", **c4) == 1
    assert value(exporter, "moeperf_slo_good_requests_total", **c4) == 1
    assert value(exporter, "moeperf_output_tokens_total", **c4) == 8
    assert value(exporter, "moeperf_prompt_tokens_total", **c4) == 18
    assert value(exporter, "moeperf_ttft_seconds_count", **c4) == 2
    assert value(exporter, "moeperf_ttft_seconds_sum", **c4) == pytest.approx(0.55)
    # ITL: 10 ms, then 20 ms over 2 tokens = two 10 ms samples; 3 per request.
    assert value(exporter, "moeperf_itl_seconds_count", **c4) == 6
    assert value(exporter, "moeperf_itl_seconds_bucket", le="0.01", **c4) == 6
    assert value(exporter, "moeperf_itl_seconds_bucket", le="0.009", **c4) == 0
    assert value(exporter, "moeperf_tpot_seconds_sum", **c4) == pytest.approx(0.02)
    assert value(exporter, "moeperf_load_level", **c4) == 4


def test_itl_buckets_resolve_one_millisecond():
    exporter = LiveExporter("nightly", "synthetic")
    r = ok_record(chunk_ns=[0, 50 * MS, 52 * MS], chunk_tokens=[0, 1, 1], last_token_ns=52 * MS)
    exporter.observe_request(r)
    assert value(exporter, "moeperf_itl_seconds_bucket", scenario="c=4", le="0.001") == 0
    assert value(exporter, "moeperf_itl_seconds_bucket", scenario="c=4", le="0.002") == 1


def test_worker_health_and_in_flight():
    exporter = LiveExporter("nightly", "synthetic")
    exporter.set_in_flight("c=4", 3)
    exporter.observe_worker(1, 0.0025, 0.4)
    exporter.client_bottleneck()
    assert value(exporter, "moeperf_in_flight_requests", scenario="c=4") == 3
    assert value(exporter, "moeperf_client_loop_lag_seconds", worker="1") == 0.0025
    assert value(exporter, "moeperf_client_cpu_ratio", worker="1") == 0.4
    assert value(exporter, "moeperf_client_bottleneck_levels_total") == 1


def test_target_counters_grow_by_window_deltas_and_gauges_follow():
    exporter = LiveExporter("nightly", "synthetic")

    def scrape(accepted: float, usage: float) -> list[dict]:
        return [
            {"name": "moeperf_target_spec_decode_accepted_tokens", "labels": {},
             "kind": "counter", "value": 1000 + accepted, "window_value": accepted},
            {"name": "moeperf_target_kv_cache_usage_ratio", "labels": {}, "kind": "gauge",
             "value": usage, "window_value": usage},
            {"name": "not_canonical", "labels": {}, "kind": "gauge", "value": 1, "window_value": 1},
        ]  # fmt: skip

    exporter.observe_target("c=1", scrape(10, 0.2))
    exporter.observe_target("c=1", scrape(25, 0.5))
    # A new level: its window starts again from zero.
    exporter.observe_target("c=4", scrape(5, 0.7))
    name = "moeperf_target_spec_decode_accepted_tokens_total"
    assert value(exporter, name, scenario="c=1") == 25
    assert value(exporter, name, scenario="c=4") == 5
    assert value(exporter, "moeperf_target_kv_cache_usage_ratio", scenario="c=1") == 0.5


def test_training_steps():
    exporter = LiveExporter("nightly", "reference")
    step = StepRecord(
        step=3, rank=0, start_ns=0, end_ns=2_000_000_000, tokens=4096, mfu=0.31,
        peak_memory_bytes=10**9, tokens_per_expert=[[10, 10, 10, 10], [40, 0, 0, 0]],
        events=[{"kind": "oom"}, {"kind": "restart", "lost_s": 12.0}],
    )  # fmt: skip
    exporter.observe_step(step, policy="adaptive")
    labels = {"policy": "adaptive", "target": "reference"}
    assert value(exporter, "moeperf_train_tokens_total", **labels) == 4096
    assert value(exporter, "moeperf_train_mfu_ratio", **labels) == 0.31
    assert value(exporter, "moeperf_train_oom_events_total", **labels) == 1
    assert value(exporter, "moeperf_train_restarts_total", **labels) == 1
    assert value(exporter, "moeperf_train_step_seconds_sum", **labels) == 2.0
    assert value(exporter, "moeperf_train_expert_load_imbalance_ratio", **labels) == 4.0
    assert expert_imbalance(StepRecord(0, 0, 0, 1, 1, tokens_per_expert=[[0, 0]])) == 0.0


def test_served_over_http_on_loopback():
    exporter = LiveExporter("nightly", "synthetic")
    exporter.start_level("c=1", 1)
    port = exporter.serve(0)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            body = answer.read().decode()
    finally:
        exporter.close()
    assert 'moeperf_load_level{scenario="c=1",suite="nightly",target="synthetic"} 1.0' in body
    # No _created series: they would only bloat the exposition and pushed groups.
    assert "_created" not in body


def test_unreachable_pushgateway_is_a_warning_without_credentials(unused_tcp_port):
    exporter = LiveExporter("nightly", "synthetic")
    url = f"http://ci:s3cret@127.0.0.1:{unused_tcp_port}"
    warning = push_run(url, exporter, suite="nightly", target="synthetic", success=False)
    assert warning is not None and "not pushed" in warning
    assert "s3cret" not in warning and f"127.0.0.1:{unused_tcp_port}" in warning
    # A failed run does not set the last-success time.
    assert not any(k[0].startswith("moeperf_last_success") for k in samples(exporter))


def test_redact_url():
    assert redact_url("http://u:p@host:9091/x") == "http://host:9091/x"
    assert redact_url("http://host:9091") == "http://host:9091"


def device_sample(t_s: float, **fields) -> DeviceSample:
    base = dict(
        t_ns=int(t_s * 1e9), source="dcgm", device="h1:gpu0", name="NVIDIA H200", host="h1",
        scenario="c=4",
    )  # fmt: skip
    base.update(fields)
    return DeviceSample(**base)  # type: ignore[arg-type]


def test_device_samples_become_gauges_and_an_energy_counter():
    exporter = LiveExporter("nightly", "synthetic")
    gpu = {"source": "dcgm", "device": "h1:gpu0"}
    # A counter: its increases, a reset (driver reload) adding nothing.
    for t_s, energy_j in ((0, 1000.0), (1, 1400.0), (2, 1900.0), (3, 10.0), (4, 60.0)):
        exporter.observe_device(
            device_sample(t_s, energy_j=energy_j, power_w=450.0, utilization_ratio=0.9,
                          memory_used_bytes=100 * 2**30, memory_total_bytes=141 * 2**30)
        )  # fmt: skip
    assert value(exporter, "moeperf_device_energy_joules_total", **gpu) == 950
    assert value(exporter, "moeperf_device_power_watts", **gpu) == 450
    assert value(exporter, "moeperf_device_utilization_ratio", **gpu) == 0.9
    assert value(exporter, "moeperf_device_memory_used_bytes", **gpu) == 100 * 2**30
    # No counter: the trapezoid of power, 100 W then 300 W over 2 s = 400 J.
    nvml = {"source": "nvml", "device": "gpu0"}
    for t_s, power_w in ((0, 100.0), (2, 300.0)):
        exporter.observe_device(device_sample(t_s, source="nvml", device="gpu0", power_w=power_w))
    assert value(exporter, "moeperf_device_energy_joules_total", **nvml) == 400
    # The target's process: labelled "process", not by pid; no power, so no energy series.
    exporter.observe_device(
        device_sample(0, source="process", device="pid:4242", rss_bytes=2**28, cpu_ratio=1.5)
    )
    proc = {"source": "process", "device": "process"}
    assert value(exporter, "moeperf_target_process_resident_memory_bytes", **proc) == 2**28
    assert value(exporter, "moeperf_target_process_cpu_ratio", **proc) == 1.5
    text = generate_latest(exporter.registry).decode()
    assert 'moeperf_device_energy_joules_total{device="process"' not in text
    assert "pid:4242" not in text
