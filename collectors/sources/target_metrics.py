"""A target's own /metrics, read through dialect adapters into canonical series.

Pure: text in, ``TargetSample`` records out; the HTTP side is ``suites.serving.observe.scraper``.
The text is parsed by prometheus_client's parser, which names a typed counter family
without its ``_total``; an untyped one keeps it, so adapters strip it themselves.

Dialects (the target's names -> ``collectors.export.metric_names`` plus the extras below):

- vLLM (``vllm:``): newest names first; a server exporting an old and a new name for one
  quantity (both live during vLLM's deprecation periods) is read once. ``engine`` /
  ``model_name`` copies are summed (counts) or averaged (ratios). vLLM counts prefix-cache
  hits and queries in tokens; speculative decoding as draft rounds (``num_drafts``), draft
  and accepted tokens and accepted tokens per draft ``position``; ``num_preemptions``.
- SGLang (``sglang:``): ``cache_hit_rate`` is a gauge (the last prefill batches' hit rate),
  not counters, so the prefix-cache hit/query counters stay absent for SGLang and the rate
  is kept as ``mn.TARGET_PREFIX_HIT_RATIO``, gauge-only. Draft/accepted counters are absent
  too; ``spec_accept_length`` (mean tokens per verify step) becomes ``mn.TARGET_ACCEPT_LENGTH``.
  Only the first tensor/pipeline rank of a data-parallel rank is read: with
  ``--enable-metrics-for-all-schedulers`` every rank repeats the same scheduler state.
  ``num_retracted_requests`` (a counter) is its preemptions.
- reference (``reference_``): the contract the reference serving engine must export, in
  ``REFERENCE_CONTRACT`` (exposition names, ``_total`` on counters): vLLM's set plus its
  engine steps; accepted tokens per draft ``position`` only where MTP is on.
- synthetic (``synthetic_``): running and waiting requests, token/request counters; it has no KV
  cache, prefix cache, speculation or experts, so those series are absent, never zero.

``mn.TARGET_FINISHED_REQUESTS`` is each engine's own notion: vLLM ``request_success`` (every
finish reason, aborts included), SGLang ``num_requests``, synthetic and reference
``requests{status="ok"}``. Compare it within one target, not across engines.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from prometheus_client.metrics_core import Metric as Family
from prometheus_client.parser import text_string_to_metric_families

from moeperf.collectors.errors import CollectorError
from moeperf.collectors.export import metric_names as mn
from moeperf.collectors.export.metric_names import Metric

DialectName = Literal["vllm", "sglang", "tgi", "reference", "synthetic", "unknown"]
SampleKind = Literal["gauge", "counter"]
Labels = tuple[tuple[str, str], ...]  # sorted (name, value) pairs


class ExpositionError(CollectorError):
    """The text is not in the Prometheus exposition format."""


# Gauges whose copies (engines, data-parallel ranks) are averaged rather than summed.
_MEAN_OF_COPIES = frozenset(
    m.name for m in (mn.TARGET_KV_USAGE, mn.TARGET_PREFIX_HIT_RATIO, mn.TARGET_ACCEPT_LENGTH)
)

# Canonical target series the dialects need beyond metric_names.TARGET_METRICS (read into
# per-level counters by collectors.target_counters; not re-exported live). Proposed for
# collectors/export/metric_names.py (then dashboards can use them); kept here until they move.
TARGET_DRAFTS = Metric(
    mn.PREFIX + "target_spec_decode_drafts",
    "counter",
    "Speculative (MTP) draft rounds: one per request per speculative step.",
    mn.SERVING_LABELS,
    "short",
)
TARGET_ACCEPTED_PER_POSITION = Metric(
    mn.PREFIX + "target_spec_decode_accepted_tokens_per_position",
    "counter",
    "Draft tokens accepted, by their position in the draft (0: first).",
    (*mn.SERVING_LABELS, "position"),
    "short",
)
TARGET_PREEMPTIONS = Metric(
    mn.PREFIX + "target_preemptions",
    "counter",
    "Requests the target preempted (SGLang: retracted), to be recomputed later.",
    mn.SERVING_LABELS,
    "short",
)
TARGET_ENGINE_STEPS = Metric(
    mn.PREFIX + "target_engine_steps",
    "counter",
    "Engine steps (forward passes over the running batch) the target ran.",
    mn.SERVING_LABELS,
    "short",
)

TARGET_KV_BLOCKS = Metric(
    mn.PREFIX + "target_kv_cache_blocks",
    "gauge",
    "KV-cache blocks the target has in all (with the usage ratio: the blocks in use).",
    mn.SERVING_LABELS,
    "short",
)

TARGET_KV_BYTES = Metric(
    mn.PREFIX + "target_kv_cache_used_bytes",
    "gauge",
    "Bytes of the target's KV-cache blocks in use.",
    mn.SERVING_LABELS,
    "bytes",
)
# prometheus_client's process collector, on by default in vLLM's and SGLang's registries:
# the resident memory of the process serving /metrics (a soak's memory of a url target).
TARGET_PROCESS_RSS = Metric(
    mn.PREFIX + "target_process_resident_memory_bytes",
    "gauge",
    "Resident memory of the target's process that serves /metrics, as it reports it.",
    mn.SERVING_LABELS,
    "bytes",
)
TARGET_LINEAR_STATE_BYTES = Metric(
    mn.PREFIX + "target_linear_state_used_bytes",
    "gauge",
    "Bytes of linear-attention state the target's running requests hold (hybrid models).",
    mn.SERVING_LABELS,
    "bytes",
)


@dataclass(frozen=True, slots=True)
class SeriesMap:
    """Where one canonical series comes from in a dialect."""

    sources: tuple[str, ...]  # family names without _total, preferred first; first found wins
    metric: Metric
    labels: tuple[str, ...] = ()  # target labels kept, named as canonical labels
    only: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (label, accepted values)


@dataclass(frozen=True, slots=True)
class Dialect:
    name: DialectName
    prefix: str
    series: tuple[SeriesMap, ...]
    # Labels of copies that repeat one state (tensor ranks): only the lowest is read.
    shard_labels: tuple[str, ...] = ()


def _s(sources: str | tuple[str, ...], metric: Metric, **kw: Any) -> SeriesMap:
    return SeriesMap((sources,) if isinstance(sources, str) else sources, metric, **kw)


VLLM = Dialect("vllm", "vllm:", (
    _s(("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"), mn.TARGET_KV_USAGE),
    _s("vllm:num_requests_running", mn.TARGET_RUNNING),
    _s("vllm:num_requests_waiting", mn.TARGET_WAITING),
    _s(("vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits"), mn.TARGET_PREFIX_HITS),
    _s(("vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries"), mn.TARGET_PREFIX_QUERIES),
    _s("vllm:gpu_prefix_cache_hit_rate", mn.TARGET_PREFIX_HIT_RATIO),  # v0 only: a gauge
    _s("vllm:spec_decode_num_draft_tokens", mn.TARGET_DRAFT_TOKENS),
    _s("vllm:spec_decode_num_accepted_tokens", mn.TARGET_ACCEPTED_TOKENS),
    _s("vllm:spec_decode_num_drafts", TARGET_DRAFTS),
    _s("vllm:spec_decode_num_accepted_tokens_per_pos", TARGET_ACCEPTED_PER_POSITION,
       labels=("position",)),
    _s("vllm:num_preemptions", TARGET_PREEMPTIONS),
    _s("vllm:prompt_tokens", mn.TARGET_PROMPT_TOKENS),
    _s("vllm:generation_tokens", mn.TARGET_GENERATION_TOKENS),
    _s("vllm:request_success", mn.TARGET_FINISHED_REQUESTS),  # every finished_reason
    _s("process_resident_memory_bytes", TARGET_PROCESS_RSS),
))  # fmt: skip
SGLANG = Dialect("sglang", "sglang:", (
    _s("sglang:token_usage", mn.TARGET_KV_USAGE),
    _s("sglang:num_running_reqs", mn.TARGET_RUNNING),
    _s("sglang:num_queue_reqs", mn.TARGET_WAITING),
    _s("sglang:cache_hit_rate", mn.TARGET_PREFIX_HIT_RATIO),
    _s("sglang:spec_accept_length", mn.TARGET_ACCEPT_LENGTH),
    _s("sglang:num_retracted_requests", TARGET_PREEMPTIONS),
    _s("sglang:prompt_tokens", mn.TARGET_PROMPT_TOKENS),
    _s("sglang:generation_tokens", mn.TARGET_GENERATION_TOKENS),
    _s("sglang:num_requests", mn.TARGET_FINISHED_REQUESTS),
    _s("process_resident_memory_bytes", TARGET_PROCESS_RSS),
), shard_labels=("tp_rank", "pp_rank"))  # fmt: skip
# The reference serving engine's contract (it is a later issue): it exports these names,
# counters with _total; expert tokens per (layer, expert); requests by status (ok counted).
REFERENCE = Dialect("reference", "reference_", (
    _s("reference_kv_cache_usage_ratio", mn.TARGET_KV_USAGE),
    _s("reference_kv_cache_blocks", TARGET_KV_BLOCKS),
    _s("reference_kv_cache_used_bytes", TARGET_KV_BYTES),
    _s("reference_linear_state_used_bytes", TARGET_LINEAR_STATE_BYTES),
    _s("reference_requests_running", mn.TARGET_RUNNING),
    _s("reference_requests_waiting", mn.TARGET_WAITING),
    _s("reference_prefix_cache_hits", mn.TARGET_PREFIX_HITS),
    _s("reference_prefix_cache_queries", mn.TARGET_PREFIX_QUERIES),
    _s("reference_spec_decode_draft_tokens", mn.TARGET_DRAFT_TOKENS),
    _s("reference_spec_decode_accepted_tokens", mn.TARGET_ACCEPTED_TOKENS),
    _s("reference_spec_decode_num_drafts", TARGET_DRAFTS),
    _s("reference_spec_decode_accepted_tokens_per_position", TARGET_ACCEPTED_PER_POSITION,
       labels=("position",)),
    _s("reference_preemptions", TARGET_PREEMPTIONS),
    _s("reference_steps", TARGET_ENGINE_STEPS),
    _s("reference_expert_tokens", mn.TARGET_EXPERT_TOKENS, labels=("layer", "expert")),
    _s("reference_prompt_tokens", mn.TARGET_PROMPT_TOKENS),
    _s("reference_generation_tokens", mn.TARGET_GENERATION_TOKENS),
    _s("reference_requests", mn.TARGET_FINISHED_REQUESTS, only=(("status", ("ok",)),)),
))  # fmt: skip
SYNTHETIC = Dialect("synthetic", "synthetic_", (
    _s("synthetic_requests_running", mn.TARGET_RUNNING),
    _s("synthetic_requests_waiting", mn.TARGET_WAITING),
    _s("synthetic_prompt_tokens", mn.TARGET_PROMPT_TOKENS),
    _s("synthetic_generation_tokens", mn.TARGET_GENERATION_TOKENS),
    _s("synthetic_requests", mn.TARGET_FINISHED_REQUESTS, only=(("status", ("ok",)),)),
))  # fmt: skip
# Hugging Face TGI (metrics-rs names): its batch and queue sizes and finished requests;
# it exports no KV-cache, prefix-cache or speculation counters.
TGI = Dialect("tgi", "tgi_", (
    _s("tgi_batch_current_size", mn.TARGET_RUNNING),
    _s("tgi_queue_size", mn.TARGET_WAITING),
    _s("tgi_request_success", mn.TARGET_FINISHED_REQUESTS),
))  # fmt: skip
DIALECTS = (VLLM, SGLANG, TGI, REFERENCE, SYNTHETIC)  # detection order


def _exposition_name(m: SeriesMap) -> str:
    return m.sources[0] + ("_total" if m.metric.kind == "counter" else "")


# What the reference target must export: exposition name -> (type, labels).
REFERENCE_CONTRACT = {
    _exposition_name(m): (m.metric.kind, (*m.labels, *(k for k, _ in m.only)))
    for m in REFERENCE.series
}


@dataclass(frozen=True, slots=True)
class TargetSample:
    """One canonical series as read from one copy (``source``) inside the target.

    ``labels`` are canonical labels only (layer, expert); ``source`` holds the target's
    own remaining labels (engine, model_name, dp_rank, ...) so counters are windowed per
    copy before copies are combined (a restart of one engine is then seen as its reset).
    """

    name: str  # a canonical Metric.name
    labels: Labels
    value: float
    kind: SampleKind
    source: Labels = ()


def parse_exposition(text: str) -> list[Family]:
    """Families of a Prometheus text exposition; ``ExpositionError`` if it is not one."""
    try:
        return list(text_string_to_metric_families(text))
    except (ValueError, TypeError, IndexError) as exc:
        raise ExpositionError(f"not Prometheus text exposition: {exc}") from None


def _base_name(family: Family) -> str:
    name = family.name
    if family.type in ("counter", "unknown") and name.endswith("_total"):
        return name[: -len("_total")]
    return name


def detect_dialect(families: Iterable[Family]) -> DialectName:
    names = [f.name for f in families]
    for dialect in DIALECTS:
        if any(n.startswith(dialect.prefix) for n in names):
            return dialect.name
    return "unknown"


def _dialect(name: DialectName) -> Dialect | None:
    return next((d for d in DIALECTS if d.name == name), None)


def canonical_samples(
    families: Sequence[Family], dialect: DialectName | None = None
) -> list[TargetSample]:
    """Per-copy canonical samples of ``families`` (dialect detected when not given)."""
    spec = _dialect(dialect or detect_dialect(families))
    if spec is None:
        return []
    by_name: dict[str, Family] = {}
    for family in families:
        if family.type not in ("histogram", "summary", "gaugehistogram", "info"):
            by_name.setdefault(_base_name(family), family)
    out: list[TargetSample] = []
    for series in spec.series:
        source = next((by_name[s] for s in series.sources if s in by_name), None)
        if source is not None:
            out += _read_family(source, series, spec.shard_labels)
    return out


def _read_family(
    family: Family, series: SeriesMap, shard_labels: tuple[str, ...]
) -> list[TargetSample]:
    kind: SampleKind = "counter" if series.metric.kind == "counter" else "gauge"
    wanted = {family.name, _base_name(family) + "_total"} if kind == "counter" else {family.name}
    only = dict(series.only)
    kept: dict[tuple[Labels, Labels], tuple[Labels, float]] = {}  # -> (shard, value)
    for sample in family.samples:
        if sample.name not in wanted or not math.isfinite(sample.value):
            continue
        labels = sample.labels
        if any(labels.get(k) not in allowed for k, allowed in only.items()):
            continue
        canonical = tuple(sorted((k, labels.get(k, "")) for k in series.labels))
        rest = {k: v for k, v in labels.items() if k not in series.labels}
        shard = tuple(sorted((k, rest.pop(k)) for k in shard_labels if k in rest))
        key = (canonical, tuple(sorted(rest.items())))
        if key not in kept or _shard_order(shard) < _shard_order(kept[key][0]):
            kept[key] = (shard, float(sample.value))
    name = series.metric.name
    return [TargetSample(name, c, v, kind, source) for (c, source), (_, v) in kept.items()]


def _shard_order(shard: Labels) -> tuple:
    return tuple((k, int(v) if v.isdigit() else math.inf, v) for k, v in shard)


def read_exposition(text: str) -> tuple[DialectName, list[TargetSample]]:
    """Parse ``text``, detect its dialect, and return its canonical per-copy samples."""
    families = parse_exposition(text)
    dialect = detect_dialect(families)
    return dialect, canonical_samples(families, dialect)


@dataclass(frozen=True, slots=True)
class WindowedSample:
    """A canonical series with its copies combined, as of the latest scrape.

    Counters: ``value`` is the target's cumulative count, ``window_value`` and
    ``run_value`` its increase since the window / the run began. Gauges: all three are
    the latest value.
    """

    name: str
    labels: Labels
    kind: SampleKind
    value: float
    window_value: float
    run_value: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "labels": dict(self.labels),
            "kind": self.kind,
            "value": self.value,
            "window_value": self.window_value,
            "run_value": self.run_value,
        }


class CounterWindow:
    """Counter increases over a run and over the current window (a load level, an arm).

    Like Prometheus' ``increase()``: a value lower than the last means the target
    restarted, and the new value counts in full. The first scrape of a run is its
    baseline (what the target counted before the run is not the run's); a copy that
    first appears later counts from zero. ``start_window()`` starts a new window from the
    latest values; a caller scrapes right before it so the boundary is exact.
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget everything: the next scrape is a new run's baseline."""
        self._last: dict[tuple[str, Labels, Labels], float] = {}
        self._run: dict[tuple[str, Labels, Labels], float] = {}
        self._window: dict[tuple[str, Labels, Labels], float] = {}
        self._primed = False

    def start_window(self) -> None:
        self._window = {}

    def observe(self, samples: Iterable[TargetSample]) -> list[WindowedSample]:
        combined: dict[tuple[str, Labels], list[tuple[TargetSample, float, float]]] = {}
        for s in samples:
            key = (s.name, s.labels, s.source)
            increase = 0.0
            if s.kind == "counter":
                last = self._last.get(key)
                if last is None:
                    increase = s.value if self._primed else 0.0
                else:
                    increase = s.value - last if s.value >= last else s.value
                self._last[key] = s.value
                self._run[key] = self._run.get(key, 0.0) + increase
                self._window[key] = self._window.get(key, 0.0) + increase
            entry = (s, self._window.get(key, 0.0), self._run.get(key, 0.0))
            combined.setdefault((s.name, s.labels), []).append(entry)
        self._primed = True
        return [_combine(name, labels, copies) for (name, labels), copies in combined.items()]


def _combine(
    name: str, labels: Labels, copies: list[tuple[TargetSample, float, float]]
) -> WindowedSample:
    kind = copies[0][0].kind
    value = sum(c[0].value for c in copies)
    if kind == "gauge":
        if name in _MEAN_OF_COPIES:
            value /= len(copies)
        return WindowedSample(name, labels, kind, value, value, value)
    window = sum(c[1] for c in copies)
    run = sum(c[2] for c in copies)
    return WindowedSample(name, labels, kind, value, window, run)


def combine_copies(samples: Iterable[TargetSample]) -> dict[tuple[str, Labels], float]:
    """Latest values with copies combined (summed, or averaged for ratios), by series."""
    return {(w.name, w.labels): w.value for w in CounterWindow().observe(samples)}
