"""The records a run appends: one per serving request, one per training step.

Timestamps are integer nanoseconds of the monotonic clock, measured from the run's
anchor (``RunManifest.anchor_monotonic_ns``), so that every worker process on the host
shares one time base. Latency metrics are derived from these in ``collectors.latency``;
they are never stored instead of the timestamps.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from moeperf.collectors.schema import SCHEMA_VERSION

RequestStatus = Literal["ok", "error", "cancelled"]
# Requests sent during warm-up or cool-down are kept but excluded from summaries.
Phase = Literal["warmup", "measure", "cooldown"]

# Why a request failed, as the client classified it (README "Failed requests are data"):
# one set for every transport (asyncio's aiohttp, the Locust engine's http.client).
ErrorType = Literal[
    "connect_error",  # no connection: refused, unreachable
    "connection_reset",  # the target (or a proxy) reset the connection: RST, EPIPE
    "stream_truncated",  # the stream ended before [DONE] and without a finish_reason
    "stall_timeout",  # no byte for the read timeout (harness.stall_timeout_s)
    "timeout",  # the whole request took longer than harness.request_timeout_s
    "http_4xx",  # an HTTP error answer, client side
    "http_5xx",  # an HTTP error answer, server side
    "not_streaming",  # a JSON answer where an event stream was asked for
    "invalid_response",  # an answer of another content type
    "malformed_chunk",  # an event that is not a chunk of the API
    "server_error_event",  # the stream carried an error event
    "client_error",  # any other error of the client library
]
# Where a chunk's token count came from, best first.
ChunkTokensSource = Literal[
    "usage_stats", "logprobs", "tokenizer", "server_tokenize", "assumed_one"
]
# How a stream that ended without error ended: "done" (data: [DONE] seen) or
# "finish_reason" (closed after a choice with a finish_reason, no [DONE]).
StreamEnd = Literal["done", "finish_reason"]


@dataclass(slots=True)
class RequestRecord:
    """One request as the client saw it.

    ``chunk_ns[i]`` is when the bytes of the i-th SSE data event arrived and
    ``chunk_tokens[i]`` how many generated tokens it carried (0 for role-only or
    usage-only events).
    """

    request_id: str
    scenario: str
    phase: Phase
    worker: int
    intended_send_ns: int
    send_ns: int
    done_ns: int
    status: RequestStatus
    chunk_ns: list[int] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    chunk_tokens_source: ChunkTokensSource | None = None
    first_token_ns: int | None = None
    last_token_ns: int | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    client_prompt_tokens: int | None = None
    client_output_tokens: int | None = None
    # An ErrorType when this harness recorded it; a run stored by another tool or version
    # may hold other words, kept as written.
    error_type: str | None = None
    error_message: str | None = None
    http_status: int | None = None
    server_request_id: str | None = None
    # None for a request that failed, or one stored before the field existed.
    stream_end: StreamEnd | None = None
    # A multi-turn conversation's id ("w0-c3") and this request's turn in it (from 1);
    # None for single requests.
    conversation: str | None = None
    turn: int | None = None
    # Of prompt_tokens, those the server's prefix cache held (its usage's
    # prompt_tokens_details.cached_tokens); None: the server did not say.
    cached_prompt_tokens: int | None = None
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        # Shallow: asdict() deep-copies every chunk list, most of the cost of a write.
        return {name: getattr(self, name) for name in REQUEST_FIELDS}


@dataclass(slots=True)
class StepRecord:
    """One training step (or micro-batch, when ``microbatch`` is set) of one rank."""

    step: int
    rank: int
    start_ns: int
    end_ns: int
    tokens: int
    scenario: str = ""
    microbatch: int | None = None
    loss: float | None = None
    model_flops: float | None = None
    mfu: float | None = None
    peak_memory_bytes: int | None = None
    # tokens_per_expert[layer][expert]
    tokens_per_expert: list[list[int]] = field(default_factory=list)
    policy_decisions: list[dict[str, Any]] = field(default_factory=list)
    # e.g. {"kind": "oom", "at_ns": ...} or {"kind": "restart", "lost_s": ...}
    events: list[dict[str, Any]] = field(default_factory=list)
    # True for the cluster simulator's steps (targets/cluster_sim): times, memory and MFU
    # are predicted, never measured, and every table and chart that shows them says so.
    simulated: bool = False
    # Distributed runs (suite "training-dist"); None / empty for one process. The rank's
    # pipeline stage and the job's attempt (0, then +1 per restart); the step's time split
    # (compute is the step less the rest), the 1F1B loop's own time, and the bytes moved.
    stage: int | None = None
    attempt: int | None = None
    compute_s: float | None = None
    all_to_all_s: float | None = None
    pipeline_s: float | None = None
    all_reduce_s: float | None = None
    wait_s: float | None = None
    microbatch_s: float | None = None
    all_to_all_bytes: int | None = None
    pipeline_bytes: int | None = None
    all_reduce_bytes: int | None = None
    # The main layers this rank runs: the rows of tokens_per_expert and of the lists below
    # (empty: every layer). tokens_per_local_expert[layer][i]: token-slots the rank's i-th
    # expert received from every rank; dispatched / received: token-slots the rank's
    # all-to-all sent (to itself too) and got, per layer.
    layers: list[int] = field(default_factory=list)
    tokens_per_local_expert: list[list[int]] = field(default_factory=list)
    dispatched_tokens: list[int] = field(default_factory=list)
    received_tokens: list[int] = field(default_factory=list)
    schema_version: int = SCHEMA_VERSION

    @property
    def step_time_s(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(slots=True)
class SampleRecord:
    """One measured value of a named metric that is neither a request nor a step.

    Micro-benchmark rounds are the first use: ``metric`` is the benchmark's name and each
    round's time is one sample, so the gate compares their distributions.
    """

    metric: str
    value: float
    unit: str
    # "lower" or "higher" is better.
    direction: str
    scenario: str = ""
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


REQUEST_FIELDS = tuple(f.name for f in dataclasses.fields(RequestRecord))
STEP_FIELDS = tuple(f.name for f in dataclasses.fields(StepRecord))
