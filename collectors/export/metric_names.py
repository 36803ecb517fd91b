"""Every metric moeperf exports, in one place: names, types, units, labels, buckets.

Prometheus conventions: the ``moeperf_`` prefix, base units in the name (seconds, bytes,
ratio), ``_total`` on counters, and bounded label sets only: suite, target, scenario, arm,
policy, status, worker, layer, expert, source, device. A run id or a request id is never a
label on a live series (each run would start new series forever). Dashboards import these
names, so a rename here shows up in their regenerated JSON.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

PREFIX = "moeperf_"

MetricKind = Literal["counter", "gauge", "histogram"]

# Labels every serving series carries; training series use suite, target, policy.
SERVING_LABELS = ("suite", "target", "scenario")
TRAINING_LABELS = ("suite", "target", "policy")

# 1 ms steps up to 20 ms so ITL resolves 1 ms (vLLM's smallest ITL bucket is 10 ms), then
# coarser up to a minute for stalls.
ITL_BUCKETS_S = (
    *(i / 1000 for i in range(1, 21)),
    0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75,
    1.0, 2.0, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip
# TTFT and E2E span milliseconds (a cached prefix) to minutes (a long prefill in a queue).
LATENCY_BUCKETS_S = (
    0.001, 0.002, 0.005, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.06, 0.075, 0.1, 0.125,
    0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 20.0,
    30.0, 60.0, 120.0, 300.0,
)  # fmt: skip
STEP_BUCKETS_S = (
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0,
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Metric:
    """One exported metric family. ``name`` is the family name (counters without _total)."""

    name: str
    kind: MetricKind
    help: str
    labels: tuple[str, ...]
    unit: str = ""  # Grafana unit id for panels: s, bytes, percentunit, reqps, short
    buckets: tuple[float, ...] = ()

    @property
    def sample_name(self) -> str:
        """The name a query uses: ``_total`` for counters, ``_bucket`` etc. for histograms."""
        return self.name + "_total" if self.kind == "counter" else self.name


def _m(
    name: str,
    kind: MetricKind,
    help: str,
    labels: Iterable[str],
    unit: str = "",
    buckets: Iterable[float] = (),
) -> Metric:
    return Metric(PREFIX + name, kind, help, tuple(labels), unit, tuple(buckets))


_S = SERVING_LABELS
_T = TRAINING_LABELS

# --- serving: what the client measured --------------------------------------------------
REQUESTS = _m("requests", "counter", "Requests finished, by status.", (*_S, "status"), "short")
GOOD_REQUESTS = _m(
    "slo_good_requests", "counter", "Requests ok and meeting every SLO (goodput).", _S, "short"
)
TTFT = _m(
    "ttft_seconds",
    "histogram",
    "Time to first token from the intended send time.",
    _S,
    "s",
    LATENCY_BUCKETS_S,
)
TPOT = _m(
    "tpot_seconds",
    "histogram",
    "Time per output token after the first, per request.",
    _S,
    "s",
    ITL_BUCKETS_S,
)
ITL = _m(
    "itl_seconds", "histogram", "Inter-token latency, one sample per token.", _S, "s", ITL_BUCKETS_S
)
E2E = _m(
    "e2e_seconds", "histogram", "Intended send time to last token.", _S, "s", LATENCY_BUCKETS_S
)
OUTPUT_TOKENS = _m("output_tokens", "counter", "Generated tokens of ok requests.", _S, "short")
PROMPT_TOKENS = _m("prompt_tokens", "counter", "Prompt tokens of ok requests.", _S, "short")
IN_FLIGHT = _m("in_flight_requests", "gauge", "Requests sent and not yet finished.", _S, "short")
LOAD_LEVEL = _m(
    "load_level", "gauge", "Offered load of the running level: streams or requests/s.", _S
)

# --- serving: the harness watching itself -------------------------------------------------
LOOP_LAG = _m(
    "client_loop_lag_seconds",
    "gauge",
    "Event-loop lag p99 of a load worker over its last report.",
    ("suite", "target", "worker"),
    "s",
)
CLIENT_CPU = _m(
    "client_cpu_ratio",
    "gauge",
    "CPU time of a load worker per wall second over its last report.",
    ("suite", "target", "worker"),
    "percentunit",
)
CLIENT_BOTTLENECK = _m(
    "client_bottleneck_levels",
    "counter",
    "Load levels the harness judged client-bound (the run is invalid).",
    ("suite", "target"),
    "short",
)
LAST_SUCCESS = _m(
    "last_success_timestamp_seconds",
    "gauge",
    "Unix time of the last run that completed (pushed to the Pushgateway).",
    ("suite", "target"),
    "dateTimeAsIso",
)

# --- serving: the target's own metrics, scraped and re-exported canonically ------------------
TARGET_KV_USAGE = _m(
    "target_kv_cache_usage_ratio",
    "gauge",
    "KV-cache blocks in use / total, as the target reports.",
    _S,
    "percentunit",
)
TARGET_RUNNING = _m(
    "target_running_requests", "gauge", "Requests the target is running.", _S, "short"
)
TARGET_WAITING = _m(
    "target_waiting_requests", "gauge", "Requests waiting in the target's queue.", _S, "short"
)
TARGET_PREFIX_HITS = _m(
    "target_prefix_cache_hits",
    "counter",
    "Prefix-cache hits (tokens or blocks, as the target counts).",
    _S,
    "short",
)
TARGET_PREFIX_QUERIES = _m(
    "target_prefix_cache_queries",
    "counter",
    "Prefix-cache queries, in the unit of the hits.",
    _S,
    "short",
)
TARGET_DRAFT_TOKENS = _m(
    "target_spec_decode_draft_tokens",
    "counter",
    "Speculative (MTP) draft tokens proposed.",
    _S,
    "short",
)
TARGET_ACCEPTED_TOKENS = _m(
    "target_spec_decode_accepted_tokens",
    "counter",
    "Speculative (MTP) draft tokens accepted.",
    _S,
    "short",
)
TARGET_EXPERT_TOKENS = _m(
    "target_expert_tokens",
    "counter",
    "Tokens routed to each expert of each MoE layer.",
    (*_S, "layer", "expert"),
    "short",
)

TARGET_PREFIX_HIT_RATIO = _m(
    "target_prefix_cache_hit_ratio",
    "gauge",
    "Prefix-cache hit rate as the target reports it (only where it exports no counters).",
    _S,
    "percentunit",
)
TARGET_ACCEPT_LENGTH = _m(
    "target_spec_decode_accept_length",
    "gauge",
    "Mean tokens accepted per speculative verify step, as the target reports it.",
    _S,
    "short",
)
TARGET_PROMPT_TOKENS = _m(
    "target_prompt_tokens", "counter", "Prompt tokens the target processed.", _S, "short"
)
TARGET_GENERATION_TOKENS = _m(
    "target_generation_tokens", "counter", "Tokens the target generated.", _S, "short"
)
TARGET_FINISHED_REQUESTS = _m(
    "target_finished_requests",
    "counter",
    "Requests the target counts as finished, by its own definition (see the dialect).",
    _S,
    "short",
)

# --- training ---------------------------------------------------------------------------
STEP_TIME = _m(
    "train_step_seconds", "histogram", "Wall time of one training step.", _T, "s", STEP_BUCKETS_S
)
TRAIN_TOKENS = _m("train_tokens", "counter", "Tokens trained on.", _T, "short")
MFU = _m("train_mfu_ratio", "gauge", "Model FLOPs utilization of the last step.", _T, "percentunit")
PEAK_MEMORY = _m(
    "train_peak_memory_bytes", "gauge", "Peak device memory of the last step.", _T, "bytes"
)
OOMS = _m("train_oom_events", "counter", "Out-of-memory events.", _T, "short")
RESTARTS = _m(
    "train_restarts", "counter", "Restarts from a checkpoint after a failure.", _T, "short"
)
EXPERT_IMBALANCE = _m(
    "train_expert_load_imbalance_ratio",
    "gauge",
    "Max / mean tokens per expert in the last step, worst layer.",
    _T,
)

# --- accelerators and the target's process, sampled beside the load (collectors.accel_*) ---
# ``device`` is the GPU ("gpu0", "host:gpu0") or "process" for the target's process tree
# (never its pid: a restarted target would start new series); bounded by the devices.
_D = ("suite", "target", "source", "device")
DEVICE_UTILIZATION = _m(
    "device_utilization_ratio",
    "gauge",
    "Share of the last sample period a kernel ran on the device (NVML / DCGM).",
    _D,
    "percentunit",
)
DEVICE_MEMORY_USED = _m("device_memory_used_bytes", "gauge", "Device memory in use.", _D, "bytes")
DEVICE_MEMORY_TOTAL = _m("device_memory_total_bytes", "gauge", "Device memory in all.", _D, "bytes")
DEVICE_POWER = _m("device_power_watts", "gauge", "Power draw of the device.", _D, "watt")
DEVICE_ENERGY = _m(
    "device_energy_joules",
    "counter",
    "Energy the device used during the run: its energy counter's increase, else power x time.",
    _D,
    "joule",
)
DEVICE_TEMPERATURE = _m(
    "device_temperature_celsius", "gauge", "Temperature of the device.", _D, "celsius"
)
DEVICE_SM_CLOCK = _m("device_sm_clock_hertz", "gauge", "SM clock of the device.", _D, "hertz")
TARGET_PROCESS_RSS = _m(
    "target_process_resident_memory_bytes",
    "gauge",
    "Resident memory of the target's process tree (a target the harness started).",
    _D,
    "bytes",
)
TARGET_PROCESS_CPU = _m(
    "target_process_cpu_ratio",
    "gauge",
    "CPU seconds of the target's process tree per wall second (above 1 on several cores).",
    _D,
    "percentunit",
)

SERVING_METRICS = (
    REQUESTS, GOOD_REQUESTS, TTFT, TPOT, ITL, E2E, OUTPUT_TOKENS, PROMPT_TOKENS, IN_FLIGHT,
    LOAD_LEVEL, LOOP_LAG, CLIENT_CPU, CLIENT_BOTTLENECK,
)  # fmt: skip
TARGET_METRICS = (
    TARGET_KV_USAGE, TARGET_RUNNING, TARGET_WAITING, TARGET_PREFIX_HITS, TARGET_PREFIX_QUERIES,
    TARGET_DRAFT_TOKENS, TARGET_ACCEPTED_TOKENS, TARGET_EXPERT_TOKENS, TARGET_PREFIX_HIT_RATIO,
    TARGET_ACCEPT_LENGTH, TARGET_PROMPT_TOKENS, TARGET_GENERATION_TOKENS, TARGET_FINISHED_REQUESTS,
)  # fmt: skip
TRAINING_METRICS = (STEP_TIME, TRAIN_TOKENS, MFU, PEAK_MEMORY, OOMS, RESTARTS, EXPERT_IMBALANCE)
DEVICE_METRICS = (
    DEVICE_UTILIZATION, DEVICE_MEMORY_USED, DEVICE_MEMORY_TOTAL, DEVICE_POWER, DEVICE_ENERGY,
    DEVICE_TEMPERATURE, DEVICE_SM_CLOCK, TARGET_PROCESS_RSS, TARGET_PROCESS_CPU,
)  # fmt: skip
ALL_METRICS = (
    *SERVING_METRICS, *TARGET_METRICS, *TRAINING_METRICS, *DEVICE_METRICS, LAST_SUCCESS,
)  # fmt: skip
