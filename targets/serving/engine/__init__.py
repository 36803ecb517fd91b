"""Continuous batching with a paged KV cache, prefix caching, chunked prefill, preemption
by recompute and MTP speculative decoding, for ``targets.model.MoETransformer``."""

from moeperf.targets.serving.engine.api import (
    EngineConfig,
    EngineError,
    EngineStats,
    InvalidRequestError,
    QueueFullError,
    RequestOutput,
    SamplingParams,
    TokenLogprob,
)

__all__ = [
    "EngineConfig",
    "EngineError",
    "EngineStats",
    "InvalidRequestError",
    "QueueFullError",
    "RequestOutput",
    "SamplingParams",
    "TokenLogprob",
]
