"""What callers of the engine see: its knobs, a request's sampling parameters, the
outputs it streams back, its counters, and its errors."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

# "error": the engine failed while serving the request (the server logs why).
FinishReason = Literal["stop", "length", "abort", "error"]


@dataclass(frozen=True)
class EngineConfig:
    """The engine's knobs (names as vLLM and SGLang users know them)."""

    # Most requests in the running batch at once; the others wait in the queue.
    max_running_requests: int = 32
    max_waiting_requests: int = 256  # a full queue refuses new requests (HTTP 429)
    # The KV cache's size, in blocks of block_size tokens.
    num_kv_blocks: int = 1024
    block_size: int = 16  # tokens per KV block
    max_num_batched_tokens: int = 512  # token budget of one step, prefill and decode together
    chunked_prefill_size: int = 256  # most prompt tokens of one request per step; 0: whole
    # Reuse the cached KV blocks of a prompt's leading full blocks (hashed by content and
    # position); the hybrid model has it off whatever this says.
    enable_prefix_caching: bool = True
    mtp_tokens: int = 0  # draft tokens per step from the MTP module (0: no speculation)
    max_context_len: int = 2048  # prompt + output tokens
    # The dtype of the weights, the computation and the KV cache.
    dtype: Literal["float32", "bfloat16"] = "float32"
    threads: int = 0  # torch intra-op threads; 0 leaves torch's default
    # A broken verifier, for tests of the harness only: every MTP draft is accepted
    # unchecked, so outputs are no longer the main model's (suites' output equality
    # must catch it). Never on in a real benchmark.
    unsafe_accept_all_drafts: bool = False

    def __post_init__(self) -> None:
        problems = []
        for name in ("max_running_requests", "num_kv_blocks", "block_size",
                     "max_num_batched_tokens", "max_context_len"):  # fmt: skip
            if getattr(self, name) < 1:
                problems.append(f"{name} must be >= 1")
        for name in ("max_waiting_requests", "chunked_prefill_size", "mtp_tokens", "threads"):
            if getattr(self, name) < 0:
                problems.append(f"{name} must be >= 0")
        if self.dtype not in ("float32", "bfloat16"):
            problems.append(f"dtype must be float32 or bfloat16, not {self.dtype!r}")
        if self.max_num_batched_tokens < self.max_running_requests * (1 + self.mtp_tokens):
            problems.append(
                "max_num_batched_tokens must cover one decode step of every running request: "
                ">= max_running_requests * (1 + mtp_tokens)"
            )
        if problems:
            raise ValueError("; ".join(problems))


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int = 16
    temperature: float = 0.0  # 0: greedy
    top_p: float = 1.0
    seed: int | None = None  # with temperature > 0: the same seed gives the same tokens
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    logprobs: int | None = None  # None: none; n >= 0: each token's logprob and the top n
    # None: none; n >= 0: each prompt token's logprob and the top n at its position (the
    # first token has none). Such a request takes no prefix-cache hit (prompt_logprobs.py).
    prompt_logprobs: int | None = None


@dataclass(frozen=True)
class TokenLogprob:
    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()  # (token id, logprob), most likely first
    rank: int | None = None  # 1: the most likely token; given for prompt tokens


@dataclass(frozen=True)
class RequestOutput:
    """New tokens of one request from one engine step (several with MTP)."""

    request_id: str
    new_token_ids: tuple[int, ...]
    new_logprobs: tuple[TokenLogprob, ...] | None
    finish_reason: FinishReason | None  # set on the last output of a request
    prompt_tokens: int
    output_tokens: int  # generated so far, these included
    cached_prompt_tokens: int  # prompt tokens served from the prefix cache
    # Asked for (SamplingParams.prompt_logprobs): every prompt token's, once, in the
    # request's first output; None for the first prompt token, which has no context.
    prompt_logprobs: tuple[TokenLogprob | None, ...] | None = None

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class EngineCounters:
    """Monotonic totals since the engine started."""

    steps: int = 0
    prefill_tokens: int = 0  # prompt tokens computed (prefix-cache hits excluded, recompute in)
    decode_tokens: int = 0  # tokens fed for decoding (drafts being verified included)
    prompt_tokens: int = 0  # prompt tokens of admitted requests
    generation_tokens: int = 0  # tokens committed to outputs
    preemptions: int = 0
    prefix_cache_queries: int = 0  # prompt tokens looked up (vLLM counts tokens, so do we)
    prefix_cache_hits: int = 0
    spec_decode_drafts: int = 0  # draft rounds (one per request per speculative step)
    spec_decode_draft_tokens: int = 0
    spec_decode_accepted_tokens: int = 0
    spec_decode_accepted_per_position: list[int] = field(default_factory=list)  # [k]
    expert_tokens: list[list[int]] = field(default_factory=list)  # [layer][expert]
    finished_requests: dict[str, int] = field(default_factory=dict)  # finish reason -> count


@dataclass(frozen=True)
class EngineStats:
    """A consistent snapshot, taken between steps."""

    running: int
    waiting: int
    kv_blocks_used: int
    kv_blocks_total: int
    counters: EngineCounters
    kv_bytes_used: int = 0  # the blocks in use x their bytes (keys, values, MTP hidden)
    # A hybrid model's linear-attention state: running requests x its bytes per sequence
    # (conv and recurrent state of every linear layer); 0 for full attention only.
    linear_state_bytes_used: int = 0
    prefix_caching_off_reason: str | None = None  # None: prefix caching is on

    @property
    def kv_usage_ratio(self) -> float:
        return self.kv_blocks_used / self.kv_blocks_total


class EngineError(Exception):
    """Root of the engine's errors."""


class InvalidRequestError(EngineError, ValueError):
    """The request cannot be served as asked (the message says why and what is valid)."""


class QueueFullError(EngineError):
    """The waiting queue is at max_waiting_requests."""
