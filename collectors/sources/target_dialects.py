"""The dialects of targets' own /metrics: which of a target's families becomes which
canonical series (``collectors.export.metric_names`` plus the extras below).

- vLLM (``vllm:``): newest names first; a server exporting an old and a new name for one
  quantity (both live during vLLM's deprecation periods) is read once. ``engine`` /
  ``model_name`` copies are summed (counts) or averaged (ratios). vLLM counts prefix-cache
  hits and queries in tokens; speculative decoding as draft rounds (``num_drafts``), draft
  and accepted tokens and accepted tokens per draft ``position``; ``num_preemptions``;
  ``prompt_tokens_cached`` (prompt tokens served from a cache, local and external: there
  without ``--enable-prompt-tokens-details``). ``cache_config_info`` is an info-style gauge
  (value 1, the configuration in its labels): its ``num_gpu_blocks``, ``block_size`` and
  ``kv_cache_memory_bytes`` labels are read as values (``SeriesMap.value_label``; a label
  reading "None" is absent). Its latency histograms (TTFT, inter-token, end-to-end, queue
  time; ``collectors.server_latency``) become counters: one per bucket (canonical label
  ``le``) plus ``_count`` and ``_sum``, so they are windowed like any counter.
- SGLang (``sglang:``): ``cache_hit_rate`` is a gauge (the last prefill batches' hit rate),
  not counters, so the prefix-cache hit/query counters stay absent for SGLang and the rate
  is kept as ``mn.TARGET_PREFIX_HIT_RATIO``, gauge-only. Draft/accepted counters are absent
  too; ``spec_accept_length`` (mean tokens per verify step) becomes ``mn.TARGET_ACCEPT_LENGTH``.
  Only the first tensor/pipeline rank of a data-parallel rank is read: with
  ``--enable-metrics-for-all-schedulers`` every rank repeats the same scheduler state.
  ``num_retracted_requests`` (a counter) is its preemptions.
- reference (``reference_``): the contract the reference serving engine must export, in
  ``REFERENCE_CONTRACT`` (exposition names, ``_total`` on counters): vLLM's counters and
  gauges plus its engine steps; accepted tokens per draft ``position`` only where MTP is
  on. It has no latency histograms, cached-prompt counter or block size: those stay absent.
- synthetic (``synthetic_``): running and waiting requests, token/request counters; it has no KV
  cache, prefix cache, speculation or experts, so those series are absent, never zero.

``mn.TARGET_FINISHED_REQUESTS`` is each engine's own notion: vLLM ``request_success`` (every
finish reason, aborts included), SGLang ``num_requests``, synthetic and reference
``requests{status="ok"}``. Compare it within one target, not across engines.

Apart from ``target_metrics.py`` (reading an exposition through these): tables only, the
place to look when a target renames a metric.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from moeperf.collectors.export import metric_names as mn
from moeperf.collectors.export.metric_names import Metric

DialectName = Literal["vllm", "sglang", "tgi", "reference", "synthetic", "unknown"]


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

# vLLM's cache_config_info: the tokens one KV block holds, and the bytes of the whole cache.
TARGET_KV_BLOCK_TOKENS = Metric(
    mn.PREFIX + "target_kv_cache_block_tokens",
    "gauge",
    "Tokens one KV-cache block of the target holds (its block size).",
    mn.SERVING_LABELS,
    "short",
)
TARGET_KV_CACHE_BYTES = Metric(
    mn.PREFIX + "target_kv_cache_bytes",
    "gauge",
    "Bytes of the target's whole KV cache, as it states it.",
    mn.SERVING_LABELS,
    "bytes",
)
TARGET_PROMPT_TOKENS_CACHED = Metric(
    mn.PREFIX + "target_prompt_tokens_cached",
    "counter",
    "Prompt tokens the target served from a cache (vLLM: its own and external ones).",
    mn.SERVING_LABELS,
    "short",
)
# The target's own latency histograms (collectors.server_latency says what each measures).
# Read as counters: <name>_bucket{le} per bucket, <name>_count and <name>_sum.
TARGET_SERVER_TTFT = Metric(
    mn.PREFIX + "target_server_ttft_seconds",
    "histogram",
    "The target's own time to first token (vLLM: API server's arrival -> first token).",
    mn.SERVING_LABELS,
    "s",
)
TARGET_SERVER_ITL = Metric(
    mn.PREFIX + "target_server_itl_seconds",
    "histogram",
    "The target's own inter-token latency (vLLM: between a request's engine steps).",
    mn.SERVING_LABELS,
    "s",
)
TARGET_SERVER_E2E = Metric(
    mn.PREFIX + "target_server_e2e_seconds",
    "histogram",
    "The target's own end-to-end request latency (vLLM: arrival -> last token).",
    mn.SERVING_LABELS,
    "s",
)
TARGET_SERVER_QUEUE = Metric(
    mn.PREFIX + "target_server_queue_seconds",
    "histogram",
    "The target's own queue time (vLLM: queued in the engine -> first scheduled).",
    mn.SERVING_LABELS,
    "s",
)
SERVER_HISTOGRAMS = (TARGET_SERVER_TTFT, TARGET_SERVER_ITL, TARGET_SERVER_E2E, TARGET_SERVER_QUEUE)
BUCKET, COUNT, SUM = "_bucket", "_count", "_sum"  # a histogram's counters: name + suffix
# Every canonical series a histogram becomes (the scraper stores them at window edges only).
HISTOGRAM_SERIES = frozenset(
    m.name + part for m in SERVER_HISTOGRAMS for part in (BUCKET, COUNT, SUM)
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
    # An info-style gauge (value 1, facts in labels): the label whose value is the value.
    value_label: str | None = None


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
    _s("vllm:prompt_tokens_cached", TARGET_PROMPT_TOKENS_CACHED),
    _s("vllm:generation_tokens", mn.TARGET_GENERATION_TOKENS),
    _s("vllm:request_success", mn.TARGET_FINISHED_REQUESTS),  # every finished_reason
    _s("process_resident_memory_bytes", TARGET_PROCESS_RSS),
    _s("vllm:cache_config_info", TARGET_KV_BLOCKS, value_label="num_gpu_blocks"),
    _s("vllm:cache_config_info", TARGET_KV_BLOCK_TOKENS, value_label="block_size"),
    _s("vllm:cache_config_info", TARGET_KV_CACHE_BYTES, value_label="kv_cache_memory_bytes"),
    _s("vllm:time_to_first_token_seconds", TARGET_SERVER_TTFT),
    # time_per_output_token_seconds: the same per-step histogram before vLLM renamed it.
    _s(("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
       TARGET_SERVER_ITL),
    _s("vllm:e2e_request_latency_seconds", TARGET_SERVER_E2E),
    _s("vllm:request_queue_time_seconds", TARGET_SERVER_QUEUE),
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
