"""What ``moeperf probe`` found out about a target: one typed record, stored as JSON (the
probe's own file, and a url run's manifest under ``target.probe``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

# Where a stream carries usage when asked for it (stream_options.include_usage):
# on every token chunk (vLLM's continuous_usage_stats), on the finish_reason chunk, in a
# chunk of its own with no choices (OpenAI, vLLM), nowhere, or the field was refused.
UsagePlacement = Literal["every_chunk", "finish_chunk", "separate_chunk", "absent", "rejected"]
# An optional field: taken (HTTP 2xx; not necessarily honoured), refused with HTTP
# 400/422, or the request failed otherwise (5xx, a dropped stream): not known.
Support = Literal["accepted", "rejected", "failed", "unknown"]
# A field that asks for something in the chunks: given on every token chunk, taken but
# not given, refused, or not known.
Honoured = Literal["honoured", "ignored", "rejected", "failed"]
PROBE_SCHEMA = 1


@dataclass(frozen=True, slots=True)
class FieldCheck:
    """Whether the target takes one optional request field (``field``), and what it said."""

    field: str
    support: Support
    detail: str = ""


@dataclass(frozen=True, slots=True)
class MetricsFacts:
    """The target's GET /metrics: whether it answers, in which dialect, with what."""

    available: bool
    detail: str  # "HTTP 404", "connection refused", "42 families"
    dialect: str | None = None  # vllm, sglang, tgi, reference, synthetic, unknown
    spec_decode_counters: bool = False
    prefix_cache_counters: bool = False


@dataclass(frozen=True, slots=True)
class ProbeResult:
    url: str
    api: str
    model: str
    models: tuple[str, ...]
    probed_at: str  # wall-clock time, ISO 8601
    sends_done: bool
    role_first_chunk: bool
    # Usage without asking for it (transformers serve sends it on the last chunk anyway).
    usage_unasked: bool
    usage_placement: UsagePlacement
    # Usage on every chunk when continuous_usage_stats is asked: exact tokens per chunk.
    continuous_usage: Honoured
    # Per-token logprobs in the chunks: exact tokens per chunk another way.
    logprobs_per_chunk: Honoured
    # From exact per-chunk counts (usage or logprobs); None: no exact count came.
    tokens_per_chunk_max: int | None
    tokens_per_chunk_mean: float | None
    tokens_per_chunk_source: str | None
    fields: tuple[FieldCheck, ...]
    tokenize: bool
    detokenize: bool
    metrics: MetricsFacts
    # The endpoint found (not called) that empties the target's prefix cache.
    prefix_cache_reset: str | None
    schema: int = PROBE_SCHEMA

    def support(self, field: str) -> Support:
        """What the probe found of ``field`` ("unknown" when it did not try it)."""
        return next((f.support for f in self.fields if f.field == field), "unknown")

    @property
    def rejected_fields(self) -> tuple[str, ...]:
        return tuple(f.field for f in self.fields if f.support == "rejected")

    @property
    def multi_token_chunks(self) -> bool:
        """Chunks of several tokens: speculative decoding (or a server that batches)."""
        return (self.tokens_per_chunk_max or 0) > 1

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProbeResult:
        values = dict(data)
        values["models"] = tuple(values["models"])
        values["fields"] = tuple(FieldCheck(**f) for f in values["fields"])
        values["metrics"] = MetricsFacts(**values["metrics"])
        return cls(**values)
