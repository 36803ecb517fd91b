"""What the synthetic target does: latencies, jitter, faults, validated once at the edge.

Every field has a unit in its name where it has one; a bad value raises
``SyntheticConfigError`` (a ``ValueError``) naming the field and what it accepts. This is
the one validator of the synthetic target's settings: a spec's ``[target.synthetic]`` table
is checked by it too (suites/spec.py turns the error into one naming the spec field).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from moeperf.targets.openai_wire import USAGE_MODES, UsageMode, WireVariant

JITTER_KINDS = ("none", "uniform", "normal", "lognormal", "exponential")
FAULT_RATE_FIELDS = ("error_rate", "stall_rate", "malformed_rate", "truncate_rate")
MAX_LEAK_BYTES_PER_REQUEST = 16 * 2**20


class SyntheticConfigError(ValueError):
    """A synthetic-target setting is out of range or of the wrong type.

    ``fields`` names the settings at fault (several for a rule between them) and
    ``problem`` says what is wrong with them; with ``unknown``, they are not settings at all.
    The message is the fields followed by the problem.
    """

    def __init__(self, fields: Sequence[str], problem: str, *, unknown: bool = False) -> None:
        self.fields = tuple(fields)
        self.problem = problem
        self.unknown = unknown
        named = " + ".join(self.fields)
        super().__init__(f"{named} {problem}" if named and not unknown else problem)


@dataclass(frozen=True)
class SyntheticConfig:
    """Timing and fault model of the synthetic OpenAI-compatible server.

    Delays (seconds, measured on the server from when the request starts, which is its
    receipt unless it has to queue): ``ttft_s`` to the first token chunk, then
    ``tokens_per_chunk * itl_s`` before each further chunk (the last chunk may hold fewer
    tokens and is due correspondingly sooner).

    Capacity: with ``max_concurrent_streams`` N > 0, at most N requests are answered at
    once; the others wait in arrival order (FIFO, never refused) and start when one
    finishes, so a client sees TTFT = queue wait + ``ttft_s``. 0 is no limit. The limit
    changes no draw: the n-th request keeps its fault and delays.

    Jitter multiplies each nominal delay independently (TTFT, each inter-chunk gap), with
    ``jitter_scale`` relative to it: uniform = 1 +/- scale, normal = 1 + N(0, scale),
    lognormal = LogNormal(0, scale) (median 1), exponential = 1 + Exp(mean scale).
    Jittered delays are clipped at 0. Draws come from ``random.Random`` seeded with
    ``seed`` and the request's index, so a run is reproducible request by request.

    Faults: each request gets at most one, chosen by the same seeded draw, so each rate is
    exactly the expected fraction of requests with that fault (hence their sum is <= 1).

    Wire variant (``send_done``, ``usage``, ``role_chunk``, ``reject_unknown_fields``): how
    the stream differs from vLLM's, as other servers' do; ``targets.openai_wire.WireVariant``
    says what each means. They change no draw, so the same seed keeps the same faults.

    What one client may cost (aiohttp bounds a body's size, not its time, nor a write's):
    a body over ``max_body_bytes`` is refused 413 (64 MiB: long-context prompts exceed
    aiohttp's 1 MiB default); one not in within ``body_read_timeout_s`` of its headers is
    refused 408; a response still being written ``write_timeout_s`` after its last chunk
    was due has a client that stopped reading: the connection is aborted and the stream
    slot freed. A client that reads holds its slot for the planned time; one that does not,
    for at most ``write_timeout_s`` more.
    """

    # Delay from the request's start to its first token chunk.
    ttft_s: float = 0.05
    # Delay per token after the first chunk: each further chunk is due tokens x itl_s later.
    itl_s: float = 0.01
    # Tokens per streamed chunk (> 1 imitates MTP; the last chunk may hold fewer).
    tokens_per_chunk: int = 1
    # How each delay is jittered: none, uniform, normal, lognormal or exponential.
    jitter: str = "none"
    # The jitter's scale, relative to the nominal delay (0 with jitter = "none").
    jitter_scale: float = 0.0
    # Seed of every request's draws (its fault, its jitter), with the request's index.
    seed: int = 0
    # Output tokens of a request that sends neither max_tokens nor max_completion_tokens.
    default_output_tokens: int = 64
    # Fraction of requests answered HTTP 500 (the four rates sum to at most 1).
    error_rate: float = 0.0
    # Fraction of requests whose stream pauses stall_s halfway through its tokens.
    stall_rate: float = 0.0
    # How long a stalled stream pauses.
    stall_s: float = 5.0
    # Fraction of requests whose stream carries an event that is not JSON halfway (a
    # non-streamed answer: a body that is not JSON).
    malformed_rate: float = 0.0
    # Fraction of requests whose connection is closed halfway through the answer.
    truncate_rate: float = 0.0
    # The model name the server answers to (listed at /v1/models).
    model: str = "synthetic"
    # The latest this many responses' ground-truth records are kept (/ground_truth).
    max_records: int = 100_000
    # End each stream with data: [DONE]; false: the stream ends with its finish_reason chunk.
    send_done: bool = True
    # "as_requested": usage as stream_options asks; "end_only": on the finish_reason
    # chunk only; "never": no usage at all.
    usage: UsageMode = "as_requested"
    # Chat streams start with a role-only chunk; false: the first chunk carries a token.
    role_chunk: bool = True
    # Refuse with HTTP 422 a request with a field OpenAI does not document (ignore_eos,
    # min_tokens, top_k, ...).
    reject_unknown_fields: bool = False
    # At most this many requests answered at once; the rest wait in arrival order and
    # their TTFT includes the wait. 0: no limit.
    max_concurrent_streams: int = 0
    # POST /drill/fault opens fault windows (drill.py); set by the harness for drills only.
    drill_control: bool = False
    # Test switches for soak runs (suites/serving/soak): defects planted on purpose, so a
    # test can check that the soak finds them. Off (0) in every shipped spec.
    # The server keeps this many bytes for every request it accepts, written (not just
    # reserved) so the pages are committed and its resident memory really grows.
    leak_bytes_per_request: int = 0
    # The n-th request's TTFT and inter-chunk delays are multiplied by
    # 1 + slowdown_per_request_ratio x (n - 1): latency that grows with requests served.
    slowdown_per_request_ratio: float = 0.0
    # The largest request body accepted; HTTP 413 above it.
    max_body_bytes: int = 64 * 2**20
    # The whole request body must arrive within this time of its headers; HTTP 408 after.
    body_read_timeout_s: float = 30.0
    # A response still being written this long after its last chunk was due (the client
    # stopped reading) has its connection aborted and its stream slot freed.
    write_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        for name in ("ttft_s", "itl_s", "jitter_scale", "stall_s", "slowdown_per_request_ratio"):
            _check_number(name, getattr(self, name), low=0.0, high=math.inf, what=">= 0")
        for name in FAULT_RATE_FIELDS:
            _check_number(name, getattr(self, name), low=0.0, high=1.0, what="in [0, 1]")
        for name in ("tokens_per_chunk", "default_output_tokens", "max_records"):
            _check_int(name, getattr(self, name), low=1)
        _check_int("seed", self.seed, low=None)
        _check_int("max_concurrent_streams", self.max_concurrent_streams, low=0)
        _check_int("leak_bytes_per_request", self.leak_bytes_per_request, low=0)
        _check_int("max_body_bytes", self.max_body_bytes, low=1)
        for name in ("body_read_timeout_s", "write_timeout_s"):
            value = getattr(self, name)
            _check_number(name, value, low=0.0, high=math.inf, what="> 0")
            if value == 0:
                raise SyntheticConfigError([name], f"must be a finite number > 0; got {value!r}")
        if self.leak_bytes_per_request > MAX_LEAK_BYTES_PER_REQUEST:
            raise SyntheticConfigError(
                ["leak_bytes_per_request"],
                f"must be <= {MAX_LEAK_BYTES_PER_REQUEST} (16 MiB; a test switch, not a load "
                f"generator); got {self.leak_bytes_per_request}",
            )
        if self.jitter not in JITTER_KINDS:
            raise SyntheticConfigError(
                ["jitter"], f"must be one of {', '.join(JITTER_KINDS)}; got {self.jitter!r}"
            )
        # A scale with no jitter kind is almost surely a forgotten setting, not a wish.
        if self.jitter == "none" and self.jitter_scale > 0:
            raise SyntheticConfigError(
                ["jitter_scale"],
                f"is {self.jitter_scale} but jitter is 'none'; set jitter to one"
                f" of {', '.join(JITTER_KINDS[1:])} or jitter_scale to 0",
            )
        total_rate = sum(getattr(self, name) for name in FAULT_RATE_FIELDS)
        if total_rate > 1.0 + 1e-12:
            raise SyntheticConfigError(
                FAULT_RATE_FIELDS,
                f"must be <= 1 (a request gets at most one fault); got {total_rate:g}",
            )
        if not isinstance(self.model, str) or not self.model:
            raise SyntheticConfigError(["model"], f"must be a non-empty string; got {self.model!r}")
        for name in ("send_done", "role_chunk", "reject_unknown_fields", "drill_control"):
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise SyntheticConfigError([name], f"must be true or false; got {value!r}")
        if self.usage not in USAGE_MODES:
            raise SyntheticConfigError(
                ["usage"], f"must be one of {', '.join(USAGE_MODES)}; got {self.usage!r}"
            )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SyntheticConfig:
        """Build a config from a JSON-like mapping; unknown keys are an error, not ignored."""
        if not isinstance(data, Mapping):
            raise SyntheticConfigError(
                [], f"config must be a JSON object; got {type(data).__name__}"
            )
        known = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise SyntheticConfigError(
                unknown,
                f"unknown config field(s) {', '.join(map(repr, unknown))}; valid fields:"
                f" {', '.join(sorted(known))}",
                unknown=True,
            )
        return cls(**data)

    def wire_variant(self) -> WireVariant:
        """How this server's stream differs from vLLM's (the four wire switches)."""
        return WireVariant.of(self)

    def to_dict(self) -> dict[str, Any]:
        """The config as a JSON-ready dict (``from_dict`` of it gives an equal config)."""
        return dataclasses.asdict(self)


def _check_number(name: str, value: object, *, low: float, high: float, what: str) -> None:
    # bool is an int subclass; True as a delay is a mistake, not 1 second.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SyntheticConfigError([name], f"must be a number {what}; got {value!r}")
    if not (low <= value <= high) or math.isnan(value) or math.isinf(value):
        raise SyntheticConfigError([name], f"must be a finite number {what}; got {value!r}")


def _check_int(name: str, value: object, *, low: int | None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SyntheticConfigError([name], f"must be an integer; got {value!r}")
    if low is not None and value < low:
        raise SyntheticConfigError([name], f"must be an integer >= {low}; got {value!r}")
