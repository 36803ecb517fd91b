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

# Why a request failed, as the client classified it (docs/concepts/failed-requests.md):
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

    # Unique in the run: "w<worker>-<n>" (asyncio engine) or "L<worker>-<n>" (Locust),
    # after a prefix where a run has several pools (an MTP A/B arm's).
    request_id: str
    # The load level (scenario) the request was sent in, e.g. "c=8", "rate=4", "in=512 c=1".
    scenario: str
    # Where its intended send time fell in the level: warm-up and cool-down requests are
    # kept but left out of summaries.
    phase: Phase
    # The load worker (process) that sent it.
    worker: int
    # When it was meant to be sent: closed loop, when the stream's previous request ended;
    # open loop, its scheduled arrival. TTFT and E2E count from here.
    intended_send_ns: int
    # When it was actually sent.
    send_ns: int
    # When it ended, whichever way.
    done_ns: int
    # "ok": the stream ended normally; "error": it failed (error_type says why);
    # "cancelled": stopped by the harness (e.g. still in flight after the drain timeout).
    status: RequestStatus
    # Arrival of each SSE data event's bytes, in order.
    chunk_ns: list[int] = field(default_factory=list)
    # Generated tokens each event carried (0 for role-only or usage-only events).
    chunk_tokens: list[int] = field(default_factory=list)
    # Where chunk_tokens came from, best first: the server's per-chunk usage, logprobs,
    # a local tokenizer, the target's /tokenize, or one per non-empty chunk (assumed).
    chunk_tokens_source: ChunkTokensSource | None = None
    # Arrival of the first chunk carrying at least one generated token; None: none came.
    first_token_ns: int | None = None
    # Arrival of the last chunk carrying a generated token; None: none came.
    last_token_ns: int | None = None
    # Prompt tokens as the server's usage counts them (template and special tokens
    # included); None: the server did not say.
    prompt_tokens: int | None = None
    # Output tokens as the server's usage counts them; None: the server did not say.
    output_tokens: int | None = None
    # The prompt's tokens as the harness built it (its content, in the target's
    # tokenizer); None: no tokenizer, or a conversation's later turn.
    client_prompt_tokens: int | None = None
    # Output tokens counted by re-tokenizing the text received (after the level); None:
    # not counted.
    client_output_tokens: int | None = None
    # An ErrorType when this harness recorded it; a run stored by another tool or version
    # may hold other words, kept as written.
    error_type: str | None = None
    # What went wrong, secrets masked, cut to a bounded length; None for an ok request.
    error_message: str | None = None
    # The HTTP status of the answer; None: no answer came.
    http_status: int | None = None
    # The id the server gave the response (the first chunk's "id"); None: none given.
    server_request_id: str | None = None
    # None for a request that failed, or one stored before the field existed.
    stream_end: StreamEnd | None = None
    # A multi-turn conversation's id ("w0-c3") and this request's turn in it (from 1);
    # None for single requests.
    conversation: str | None = None
    # This request's turn in its conversation (from 1); None for single requests.
    turn: int | None = None
    # Of prompt_tokens, those the server's prefix cache held (its usage's
    # prompt_tokens_details.cached_tokens); None: the server did not say.
    cached_prompt_tokens: int | None = None
    # The record layout's version (collectors/schema.py); readers refuse one they do not know.
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        # Shallow: asdict() deep-copies every chunk list, most of the cost of a write.
        return {name: getattr(self, name) for name in REQUEST_FIELDS}


@dataclass(slots=True)
class StepRecord:
    """One training step (or micro-batch, when ``microbatch`` is set) of one rank."""

    # The optimizer step's index (from 0); a step replayed after a restart repeats it.
    step: int
    # The process's rank (0 for one process).
    rank: int
    # When the step started (simulated runs: on the simulator's clock, from 0).
    start_ns: int
    # When the step ended (simulated runs: on the simulator's clock).
    end_ns: int
    # Tokens trained in the step (training-dist: of this rank's micro-batches).
    tokens: int
    # The scenario: "POLICY/SKEW[/SIZE]" (training), "LAYOUT/POLICY/SKEW" (training-dist),
    # "JOB/POLICY/SKEW" (simulation).
    scenario: str = ""
    # Set when the record is one micro-batch rather than a whole step; None: a step.
    microbatch: int | None = None
    # Mean next-token loss over the step's micro-batches; None for simulated steps.
    loss: float | None = None
    # The step's model FLOPs (training-dist: this rank's share), recompute not counted.
    model_flops: float | None = None
    # model_flops / (step time x peak FLOP/s); None where there is none (a simulated step
    # that ran out of memory).
    mfu: float | None = None
    # The step's peak device memory (the accounted budget's on a CPU, the allocator's on
    # a GPU; simulated: the highest rank's).
    peak_memory_bytes: int | None = None
    # tokens_per_expert[layer][expert]
    tokens_per_expert: list[list[int]] = field(default_factory=list)
    # The adaptive policy's decisions, one per micro-batch and layer: the predicted peak,
    # the budget and the operators it recomputes or offloads; empty for other policies.
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
    # training-dist: the job's attempt (0, then +1 per restart).
    attempt: int | None = None
    # training-dist: the step's time less the communication below.
    compute_s: float | None = None
    # training-dist: the expert-parallel all-to-alls' time (token payload, forward and
    # backward).
    all_to_all_s: float | None = None
    # training-dist: send/recv between pipeline stages, waiting for the neighbour included.
    pipeline_s: float | None = None
    # training-dist: the all-reduces' time (gradients, the clip norm, the loss).
    all_reduce_s: float | None = None
    # training-dist: time waiting where ranks meet before a collective (the token-count
    # exchange before each all-to-all, the barrier before the gradient sums).
    wait_s: float | None = None
    # training-dist: the 1F1B loop's own time (forwards, backwards, their send/recv).
    microbatch_s: float | None = None
    # training-dist: bytes the rank moved by all-to-all in the step.
    all_to_all_bytes: int | None = None
    # training-dist: bytes the rank moved by send/recv between stages in the step.
    pipeline_bytes: int | None = None
    # training-dist: bytes the rank moved by all-reduce in the step.
    all_reduce_bytes: int | None = None
    # The main layers this rank runs: the rows of tokens_per_expert and of the lists below
    # (empty: every layer). tokens_per_local_expert[layer][i]: token-slots the rank's i-th
    # expert received from every rank; dispatched / received: token-slots the rank's
    # all-to-all sent (to itself too) and got, per layer.
    layers: list[int] = field(default_factory=list)
    # training-dist: [layer][i] token-slots the rank's i-th expert received from every rank.
    tokens_per_local_expert: list[list[int]] = field(default_factory=list)
    # training-dist: per layer, token-slots the rank's all-to-all sent (to itself too).
    dispatched_tokens: list[int] = field(default_factory=list)
    # training-dist: per layer, token-slots the rank's all-to-all received.
    received_tokens: list[int] = field(default_factory=list)
    # The record layout's version (collectors/schema.py); readers refuse one they do not know.
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

    # The metric's name (a micro-benchmark's full name).
    metric: str
    # One measured value (a micro-benchmark round's seconds per call).
    value: float
    # The value's unit ("s" for micro-benchmark rounds).
    unit: str
    # "lower" or "higher" is better.
    direction: str
    # A grouping of the samples (a micro-benchmark's group; "" for none).
    scenario: str = ""
    # The record layout's version (collectors/schema.py); readers refuse one they do not know.
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


REQUEST_FIELDS = tuple(f.name for f in dataclasses.fields(RequestRecord))
STEP_FIELDS = tuple(f.name for f in dataclasses.fields(StepRecord))
