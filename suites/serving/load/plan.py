"""What the parent process tells a load worker: once per run, then once per level."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from moeperf.collectors.request_settings import GREEDY, Sampling
from moeperf.suites.serving.load.auth import NO_HEADERS, RequestHeaders
from moeperf.suites.serving.load.openai_api import Api, MaxTokensField
from moeperf.suites.serving.workload.sources import Prompt

LoadMode = Literal["concurrency", "poisson", "gamma"]


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """Fixed for the whole run."""

    base_url: str
    api: Api
    model: str
    prompts: tuple[Prompt, ...]
    anchor_ns: int
    request_timeout_s: float
    stall_timeout_s: float
    continuous_usage: bool
    ignore_eos: bool
    # "" (none), "server" (the target's /tokenize) or a local tokenizer directory.
    tokenizer: str = ""
    extra_body: dict[str, Any] = field(default_factory=dict)
    # False: no stream_options at all (a server that rejects them).
    include_usage: bool = True
    max_tokens_field: MaxTokensField = "max_tokens"
    min_tokens: int | None = None
    # Sent with every request (an API key among them); pickled to the workers, never
    # written to disk; its repr shows no value.
    headers: RequestHeaders = NO_HEADERS
    # Sent as set; a None field is not sent (the server's default).
    sampling: Sampling = GREEDY
    # Before every request id ("w0-17"): a run with several worker pools (one per arm of
    # an interference run) keeps its ids unique, as the store requires.
    request_id_prefix: str = ""
    # Multi-turn ([workload.conversation]): each closed-loop stream holds conversations of
    # this many turns (0: single requests), waiting think_time_s between reply and turn.
    conversation_turns: int = 0
    think_time_s: float = 0.0
    # harness.planted_send_delay_s: calibration's self-check, a wait before every send.
    planted_send_delay_s: float = 0.0


@dataclass(frozen=True, slots=True)
class LevelPlan:
    """One load level as one worker runs it; times are absolute monotonic ns."""

    scenario: str
    mode: LoadMode
    start_ns: int
    duration_s: float
    warmup_s: float
    cooldown_s: float
    drain_timeout_s: float
    # Closed loop: this worker's streams. Open loop: its cap on requests in flight (0: none).
    concurrency: int
    # Open loop: this worker's share of the send schedule, seconds from start_ns.
    arrivals_s: tuple[float, ...] = ()
    # Closed loop: when each of this worker's streams sends its first request, seconds
    # from start_ns (empty: all at once; load.ramp_s).
    first_sends_s: tuple[float, ...] = ()
    # Closed loop: this worker's share of the level's request budget (None: time-bound).
    max_requests: int | None = None
    # Index (in the level's prompts) of the first prompt this worker uses, so workers do
    # not send the same prompts; with ``resume_prompts``, only on the worker's first level
    # of these prompts: a later one goes on from where the last one stopped.
    prompt_offset: int = 0
    resume_prompts: bool = True
    # The level's prompts: ``prompt_count`` of WorkerConfig.prompts from ``prompt_start``
    # (0: all of them); a sweep gives each prompt length its own slice.
    prompt_start: int = 0
    prompt_count: int = 0
    # Open loop, a trace: the prompt (index into WorkerConfig.prompts) of each arrival.
    prompt_indices: tuple[int, ...] = ()
