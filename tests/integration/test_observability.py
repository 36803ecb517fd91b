"""A real run watched by a real Prometheus: every dashboard panel's query returns data.

The serving run drives the embedded reference target (the tiny MoE on its engine, MTP and
prefix caching on), so KV-cache, prefix-cache, speculative-decoding and expert panels get
the engine's own counters through the reference adapter. Three things are stand-ins, said
here plainly: an SGLang /metrics page exported with prometheus_client (for the series only
SGLang reports: cache hit rate and accept length as gauges), a DCGM exporter's recorded page
(no GPU here: the device panels' series come from it through the run's own sampler), and
training steps and a GPU's readings built in this test (fed to the training dashboard). Everything
else comes from the run itself, live and through the Pushgateway.
"""

from __future__ import annotations

import json
import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from loopback import serving_in_thread
from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client import start_http_server as serve_registry
from prometheus_stack import free_port

from moeperf.collectors.accel_records import DeviceSample
from moeperf.collectors.export.live_export import LiveExporter
from moeperf.collectors.records import StepRecord
from moeperf.collectors.store import RunStore
from moeperf.collectors.tables import request_records
from moeperf.dashboards.queries import panel_queries, substitute_variables
from moeperf.suites.run_options import Progress
from moeperf.suites.serving.level_plan import LevelOutcome
from moeperf.suites.serving.observe.scraper import ThreadedScraper
from moeperf.suites.serving.runner import run_serving
from moeperf.suites.serving.spec import ServingSpec

pytestmark = pytest.mark.slow

GENERATED = Path(__file__).resolve().parents[2] / "dashboards" / "generated"
DCGM_PAGE = Path(__file__).resolve().parents[1] / "data" / "accel" / "dcgm_exporter_h200x2.prom"
ALL = ".*"
VARIABLES = {
    "datasource": "prometheus",
    "suite": ALL,
    "target": ALL,
    "scenario": ALL,
    "policy": ALL,
    "__rate_interval": "10s",
}


class StandInEngine:
    """A /metrics page of SGLang: the gauges only SGLang reports."""

    def __init__(self, dialect: str):
        assert dialect == "sglang"
        self.registry = CollectorRegistry()
        for name in ("sglang:num_running_reqs", "sglang:num_queue_reqs"):
            Gauge(name, name, registry=self.registry).set(3)
        Gauge("sglang:token_usage", "kv", registry=self.registry).set(0.4)
        Gauge("sglang:cache_hit_rate", "hits", registry=self.registry).set(0.6)
        Gauge("sglang:spec_accept_length", "accept", registry=self.registry).set(2.2)

    def serve(self) -> str:
        server, _ = serve_registry(0, addr="127.0.0.1", registry=self.registry)
        self._server = server
        return f"http://127.0.0.1:{server.server_port}"

    def close(self) -> None:
        self._server.shutdown()


def training_step(step: int, rng: random.Random) -> StepRecord:
    spike = step % 7 == 6
    experts = [[rng.randint(50, 150) for _ in range(4)] for _ in range(2)]
    if spike:
        experts[0][0] *= 3
    return StepRecord(
        step=step, rank=0, start_ns=step * 10**8, end_ns=step * 10**8 + 9 * 10**7,
        tokens=4096, mfu=0.25 + rng.random() / 10, peak_memory_bytes=2**30 + rng.randint(0, 2**28),
        tokens_per_expert=experts,
        events=[{"kind": "oom"}, {"kind": "restart", "lost_s": 3.0}] if spike else [],
    )  # fmt: skip


def trainer_gpu(step: int) -> DeviceSample:
    """The stand-in trainer's GPU, read at each step: 300 W, busy, its counter rising."""
    return DeviceSample(
        t_ns=step * 250_000_000, source="nvml", device="gpu0", name="stand-in", host="trainer",
        utilization_ratio=0.95, memory_used_bytes=40 * 2**30, memory_total_bytes=80 * 2**30,
        power_w=300.0, energy_j=1000.0 + 75.0 * step, sm_clock_hz=1_980_000_000,
        temperature_c=61.0, throttle_reasons=(), scenario="",
    )  # fmt: skip


class LevelClock(Progress):
    """Wall time at the end of each level, while the run's live endpoint is still up."""

    def __init__(self):
        self.level_ends: list[float] = []

    def level_done(self, outcome: LevelOutcome) -> None:
        self.level_ends.append(time.time())


@pytest.fixture
def stand_ins():
    """A stand-in SGLang scraped into an exporter, and a stand-in trainer feeding it."""
    rng = random.Random(0)
    sglang = StandInEngine("sglang")
    exporters = {"sglang": LiveExporter("observability", "sglang-standin")}
    ports = [exporter.serve(0) for exporter in exporters.values()]
    scrapers = []
    for name, engine in (("sglang", sglang),):
        exporter = exporters[name]

        def on_sample(scrape: dict[str, Any], e: LiveExporter = exporter) -> None:
            if scrape.get("window"):
                e.observe_target(scrape["window"], scrape.get("series", []))

        scraper = ThreadedScraper(engine.serve(), 0.5, on_sample)
        scraper.start()
        scraper.start_window("c=1")
        scrapers.append(scraper)
    stop = threading.Event()

    def feed() -> None:
        step = 0
        while not stop.wait(0.25):
            exporters["sglang"].observe_step(training_step(step, rng), policy="adaptive")
            exporters["sglang"].observe_device(trainer_gpu(step))
            step += 1

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    yield [f"127.0.0.1:{port}" for port in ports], exporters
    stop.set()
    feeder.join()
    for scraper in scrapers:
        scraper.stop()
    for exporter in exporters.values():
        exporter.close()
    sglang.close()


@pytest.fixture
def dcgm_exporter():
    """A DCGM exporter's page as recorded (two H200s), served on loopback: the device
    panels' series come through the run's own sampler, as they would from a GPU node."""
    page = DCGM_PAGE.read_text()

    async def metrics(_request: web.Request) -> web.Response:
        return web.Response(text=page, content_type="text/plain")

    with serving_in_thread({}, {"/metrics": metrics}) as url:
        yield url


def test_every_dashboard_query_returns_data_from_a_real_run(
    tmp_path, prometheus, pushgateway, promtool, stand_ins, dcgm_exporter
):
    stand_in_targets, stand_in_exporters = stand_ins
    run_port = free_port()
    prometheus.set_targets(
        {
            "moeperf-live": [f"127.0.0.1:{run_port}"],
            "standins": stand_in_targets,
            "pushgateway": [pushgateway.address],
        }
    )
    data = {
        "name": "observability",
        "target": {
            "kind": "reference",
            "reference": {"mtp_tokens": 2, "enable_prefix_caching": True},
        },
        "workload": {
            "input_tokens": {"mean": 48},
            "output_tokens": {"mean": 16},
            "shared_prefix_tokens": 32,
        },
        "load": {"levels": [2, 4], "duration_s": 6.0, "warmup_s": 0.5, "cooldown_s": 0.0},
        "slo": {"ttft_s": 0.5},
        # This test is about what Prometheus sees, not the harness's precision: a busy CI
        # host must not turn the run invalid (no last-success time is pushed for those).
        "harness": {"max_loop_lag_p99_s": 0.5, "max_cpu_fraction": 1.0},
        "export": {"metrics_port": run_port, "scrape_interval_s": 0.5},
        # The target's process tree, and the GPUs of a (recorded) DCGM exporter.
        "telemetry": {"sources": ["process", "dcgm"], "dcgm_url": dcgm_exporter},
    }
    store = RunStore(tmp_path / "runs")
    clock = LevelClock()
    run_id = run_serving(
        ServingSpec.model_validate(data), data, store, clock, pushgateway_url=pushgateway.url
    )
    run = store.open(run_id)
    assert run.manifest.status in ("complete", "invalid")
    # The push landed, grouped by suite, target and host, with the last-success time.
    prometheus.wait_for('moeperf_requests_total{job="moeperf", suite="observability"}', 20)
    if run.manifest.status == "complete":
        assert prometheus.query_value(
            'max(moeperf_last_success_timestamp_seconds{suite="observability"})'
        ) == pytest.approx(time.time(), abs=120)

    during_run = clock.level_ends[-1] - 0.5
    empty = []
    checked = 0
    for name in ("serving", "training"):
        dashboard = json.loads((GENERATED / f"{name}.json").read_text())
        for title, expr in panel_queries(dashboard):
            query = substitute_variables(expr, VARIABLES)
            result = prometheus.query(query, time=during_run) or prometheus.query(query)
            checked += 1
            if not result:
                empty.append(f"{name}: {title}: {query}")
    assert checked > 40
    assert not empty, "queries without data:\n" + "\n".join(empty)

    # What the run stored is what it pushed at the end: every ok request counted.
    ok_pushed = prometheus.query_value(
        'sum(moeperf_requests_total{job="moeperf", suite="observability", status="ok"})'
    )
    requests = run.requests()
    assert ok_pushed == (requests["status"] == "ok").sum()
    # And Prometheus saw the run live while it ran.
    assert prometheus.query(
        'moeperf_load_level{job="moeperf-live", scenario="c=4"}', time=clock.level_ends[-1] - 1
    )

    # promtool accepts every exposition involved.
    replay = LiveExporter("observability", "reference")
    for record in request_records(requests):
        replay.observe_request(record)
    for registry in (replay.registry, *(e.registry for e in stand_in_exporters.values())):
        ok, output = promtool(generate_latest(registry).decode())
        assert ok, output
