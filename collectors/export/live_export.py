"""Live Prometheus export of a run: the harness's /metrics on 127.0.0.1.

One ``LiveExporter`` per run owns a registry of its own (never the global one), with the
families of ``collectors.export.metric_names``. The parent process feeds it as records and
reports arrive; workers never touch it, so export costs the measuring loops nothing.
"""

from __future__ import annotations

from typing import Any
from wsgiref.simple_server import WSGIServer

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics import MetricWrapperBase

from moeperf.collectors.accel_records import DeviceSample
from moeperf.collectors.export import metric_names as names
from moeperf.collectors.export.bulk_histogram import BulkHistogram
from moeperf.collectors.export.metric_names import Metric
from moeperf.collectors.latency import request_latencies
from moeperf.collectors.records import RequestRecord, StepRecord
from moeperf.collectors.summary import NO_SLO, Slo, request_meets_slo

# `_created` series double the exposition and, pushed to a Pushgateway, pin stale
# timestamps; nothing of ours reads them.
prometheus_client.disable_created_metrics()

_KINDS = {"counter": Counter, "gauge": Gauge, "histogram": Histogram}


def _family(metric: Metric, registry: CollectorRegistry) -> MetricWrapperBase | BulkHistogram:
    if metric is names.ITL:
        # One sample per token: binned per request in one call (see bulk_histogram).
        return BulkHistogram(
            metric.name, metric.help, metric.labels, metric.buckets, registry=registry
        )
    # prometheus_client appends _total to counters itself.
    kwargs: dict[str, Any] = {"registry": registry, "labelnames": metric.labels}
    if metric.kind == "histogram":
        kwargs["buckets"] = metric.buckets
    return _KINDS[metric.kind](metric.name, metric.help, **kwargs)


class LiveExporter:
    """The metric families of one run, updated from records and reports."""

    def __init__(
        self,
        suite: str,
        target: str,
        *,
        slo: Slo = NO_SLO,
        registry: CollectorRegistry | None = None,
    ):
        self.registry = registry if registry is not None else CollectorRegistry()
        self._base = {"suite": suite, "target": target}
        self._slo = slo
        self._families = {m.name: _family(m, self.registry) for m in names.ALL_METRICS}
        itl = self._families[names.ITL.name]
        assert isinstance(itl, BulkHistogram)
        self._itl = itl
        self._children: dict[tuple, Any] = {}
        # The previous reading of each device, to increment its energy counter by deltas.
        self._last_device: dict[tuple[str, str, str], DeviceSample] = {}
        # Last exported window value of each target counter series, to increment by deltas.
        self._target_counters: dict[tuple, float] = {}
        self._server: WSGIServer | None = None
        # Counters that may never move still get a series at 0: "no client-bound level"
        # must read as 0, not as missing data.
        self._get(names.CLIENT_BOTTLENECK)

    def _get(self, metric: Metric, **labels: str) -> Any:
        """The labelled child: a Counter, Gauge or Histogram by ``metric.kind``, which
        share no update method (inc, set, observe), hence Any."""
        # Children are cached: resolving labels costs more than the update itself, and
        # this runs for every request of the run.
        key = (metric.name, *labels.values())
        child = self._children.get(key)
        if child is None:
            family = self._families[metric.name]
            assert isinstance(family, MetricWrapperBase), metric.name
            child = family.labels(**self._base, **labels)
            self._children[key] = child
        return child

    def serve(self, port: int = 0, host: str = "127.0.0.1") -> int:
        """Serve /metrics over HTTP in a daemon thread; return the bound port."""
        self._server, _thread = prometheus_client.start_http_server(
            port, addr=host, registry=self.registry
        )
        return self._server.server_port

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        # Counters that may never move still get a series at 0: "no client-bound level"
        # must read as 0, not as missing data.
        self._get(names.CLIENT_BOTTLENECK)

    # --- serving ------------------------------------------------------------------------
    def start_level(self, scenario: str, level: float) -> None:
        self._get(names.LOAD_LEVEL, scenario=scenario).set(level)
        self._get(names.IN_FLIGHT, scenario=scenario).set(0)

    def end_level(self, scenario: str) -> None:
        self._get(names.LOAD_LEVEL, scenario=scenario).set(0)
        self._get(names.IN_FLIGHT, scenario=scenario).set(0)

    def observe_request(self, record: RequestRecord) -> None:
        """Count a finished request; call it once per request (not with the amended
        versions of its record: they add client-side counts after the level), so that
        nothing here grows with the run's length.

        Warm-up and cool-down requests count too: live series show what the target saw.
        """
        scenario = record.scenario
        self._get(names.REQUESTS, scenario=scenario, status=record.status).inc()
        if record.status != "ok":
            return
        metrics = request_latencies(record)
        if metrics.ttft_s is not None:
            self._get(names.TTFT, scenario=scenario).observe(metrics.ttft_s)
            self._get(names.E2E, scenario=scenario).observe(metrics.e2e_s)
        if metrics.tpot_s is not None:
            self._get(names.TPOT, scenario=scenario).observe(metrics.tpot_s)
        itl_labels = {**self._base, "scenario": scenario}
        self._itl.observe_many(tuple(itl_labels[n] for n in names.ITL.labels), metrics.itl_s)
        if metrics.output_tokens:
            self._get(names.OUTPUT_TOKENS, scenario=scenario).inc(metrics.output_tokens)
        if record.prompt_tokens:
            self._get(names.PROMPT_TOKENS, scenario=scenario).inc(record.prompt_tokens)
        if request_meets_slo(metrics, self._slo):
            self._get(names.GOOD_REQUESTS, scenario=scenario).inc()

    def set_in_flight(self, scenario: str, requests: int) -> None:
        self._get(names.IN_FLIGHT, scenario=scenario).set(requests)

    def observe_worker(self, worker: int, loop_lag_p99_s: float, cpu_ratio: float) -> None:
        self._get(names.LOOP_LAG, worker=str(worker)).set(loop_lag_p99_s)
        self._get(names.CLIENT_CPU, worker=str(worker)).set(cpu_ratio)

    def client_bottleneck(self) -> None:
        self._get(names.CLIENT_BOTTLENECK).inc()

    def observe_target(self, scenario: str, series: list[dict[str, Any]]) -> None:
        """Re-export the target's canonical series (see collectors.sources.target_metrics).

        Gauges are set; counters are incremented by the growth of their window value, so
        the exported counter counts what happened during this run only.
        """
        families = {m.name: m for m in names.TARGET_METRICS}
        for sample in series:
            metric = families.get(sample["name"])
            if metric is None:
                continue
            labels = {k: str(v) for k, v in sample.get("labels", {}).items()}
            child = self._get(metric, scenario=scenario, **labels)
            if metric.kind == "gauge":
                child.set(sample["value"])
                continue
            key = (metric.name, scenario, tuple(sorted(labels.items())))
            window_value = sample["window_value"]
            previous = self._target_counters.get(key, 0.0)
            if window_value > previous:
                child.inc(window_value - previous)
            # A new window (level, arm) starts from zero again.
            self._target_counters[key] = window_value

    # --- accelerators and the target's process ---------------------------------------------
    def observe_device(self, sample: DeviceSample) -> None:
        """Export one sampler reading (called on the sampler's thread; prometheus_client's
        children are thread-safe, and each device is read by one sampler only)."""
        device = "process" if sample.source == "process" else sample.device
        labels = {"source": sample.source, "device": device}
        gauges = (
            (names.DEVICE_UTILIZATION, sample.utilization_ratio),
            (names.DEVICE_MEMORY_USED, sample.memory_used_bytes),
            (names.DEVICE_MEMORY_TOTAL, sample.memory_total_bytes),
            (names.DEVICE_POWER, sample.power_w),
            (names.DEVICE_TEMPERATURE, sample.temperature_c),
            (names.DEVICE_SM_CLOCK, sample.sm_clock_hz),
            (names.TARGET_PROCESS_RSS, sample.rss_bytes),
            (names.TARGET_PROCESS_CPU, sample.cpu_ratio),
        )
        for metric, value in gauges:
            if value is not None:  # a field the source cannot read makes no series
                self._get(metric, **labels).set(value)
        joules = self._energy_increase(sample)
        if joules is not None:
            self._get(names.DEVICE_ENERGY, **labels).inc(joules)

    def _energy_increase(self, sample: DeviceSample) -> float | None:
        """Joules since the device's previous sample: its counter's increase, else the
        trapezoid of its power (as collectors.accel_figures integrates it)."""
        if sample.energy_j is None and sample.power_w is None:
            return None
        key = (sample.source, sample.host, sample.device)
        previous = self._last_device.get(key)
        self._last_device[key] = sample
        if previous is None:
            return 0.0  # the series exists from the first reading on
        if sample.energy_j is not None and previous.energy_j is not None:
            # A counter that went down (the driver reloaded) adds nothing rather than a
            # negative increase.
            return max(0.0, sample.energy_j - previous.energy_j)
        if sample.power_w is not None and previous.power_w is not None:
            return (sample.power_w + previous.power_w) / 2 * (sample.t_ns - previous.t_ns) / 1e9
        return 0.0

    # --- training -----------------------------------------------------------------------
    def observe_step(self, record: StepRecord, policy: str) -> None:
        """One step of the one-process trainer, with the OOMs and restarts it records."""
        self.observe_training_step(
            record.step_time_s, record.tokens, record.mfu, record.peak_memory_bytes, policy
        )
        for event in record.events:
            if event.get("kind") == "oom":
                self.observe_oom(policy)
            elif event.get("kind") == "restart":
                self.observe_restart(policy)
        if record.tokens_per_expert:
            self._get(names.EXPERT_IMBALANCE, policy=policy).set(expert_imbalance(record))

    def observe_training_step(
        self,
        step_time_s: float,
        tokens: int,
        mfu: float | None,
        peak_memory_bytes: int | None,
        policy: str,
    ) -> None:
        """One step, of one process or of a whole job (suites/training/dist_export.py)."""
        labels = {"policy": policy}
        self._get(names.STEP_TIME, **labels).observe(step_time_s)
        self._get(names.TRAIN_TOKENS, **labels).inc(tokens)
        if mfu is not None:
            self._get(names.MFU, **labels).set(mfu)
        if peak_memory_bytes is not None:
            self._get(names.PEAK_MEMORY, **labels).set(peak_memory_bytes)

    def observe_oom(self, policy: str) -> None:
        self._get(names.OOMS, policy=policy).inc()

    def observe_restart(self, policy: str) -> None:
        self._get(names.RESTARTS, policy=policy).inc()

    # --- end of run ---------------------------------------------------------------------
    def mark_success(self) -> None:
        """Set the last-success timestamp: only ever called for a run that completed."""
        self._get(names.LAST_SUCCESS).set_to_current_time()


def expert_imbalance(record: StepRecord) -> float:
    """Max / mean tokens per expert of the most imbalanced layer (1.0 is perfectly even)."""
    worst = 0.0
    for layer in record.tokens_per_expert:
        total = sum(layer)
        if total:
            worst = max(worst, max(layer) * len(layer) / total)
    return worst
