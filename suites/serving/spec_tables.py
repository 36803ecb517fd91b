"""A serving spec's tables for every run: ``[load]``, ``[slo]``, ``[harness]``, ``[export]``,
``[gate]`` and ``[sampling]``."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from moeperf.collectors.min_effects import MIN_EFFECT_KEYS
from moeperf.collectors.request_settings import Sampling
from moeperf.suites.spec_base import STRICT, NonNegative, Positive


class _Strict(BaseModel):
    model_config = STRICT


# A level lasts this long unless load.duration_s says otherwise, or max_requests alone
# bounds it; such a count-bound level still stops sending after COUNT_BOUND_LIMIT_S.
DEFAULT_DURATION_S = 10.0
COUNT_BOUND_LIMIT_S = 600.0


class LoadSpec(_Strict):
    """A sweep: one level per entry of ``levels`` (streams, or requests/s for open loop).

    A level is bounded by time (``duration_s``) and, if given, by ``max_requests`` (every
    request sent counts, warm-up ones included): whichever comes first. With
    ``max_requests`` and no ``duration_s`` the count alone bounds it (``duration_s`` stays
    None, there is no cool-down, and ``COUNT_BOUND_LIMIT_S`` is its safety limit).
    """

    # "concurrency": closed loop, levels are streams; "poisson", "gamma": open loop,
    # levels are requests/s.
    # "trace": replay workload.trace at its recorded times; levels are speed-ups.
    mode: Literal["concurrency", "poisson", "gamma", "trace"] = "concurrency"
    # The load levels, run one after another: concurrent streams (closed loop, whole
    # numbers), requests/s (poisson, gamma), or a trace's speed-ups (trace).
    levels: Annotated[list[Annotated[float, Field(gt=0)]], Field(min_length=1)] = [1.0]
    # How long each level sends; unset: 10 s, unless max_requests alone bounds the level.
    duration_s: Positive | None = None
    # Requests sent per level, warm-up ones included; with duration_s, whichever comes first.
    max_requests: Annotated[int, Field(ge=1)] | None = None
    # Warm-up: requests meant to be sent in a level's first warmup_s are stored but left
    # out of its summaries (default 0 for a trace).
    warmup_s: NonNegative = 1.0
    # Cool-down: requests meant to be sent in a level's last cooldown_s, likewise (default
    # 0 for a trace, and must be 0 when max_requests alone bounds the level).
    cooldown_s: NonNegative = 0.5
    # Closed loop: the streams' first requests are spread evenly over this many seconds
    # from the level's start (0: all at once). Streams that start together stay in step on
    # a target whose requests all take as long (fixed output lengths, one batch), and each
    # round of sends then lands on the client and the target at one instant; the ramp
    # spreads their phases for the whole level. Within load.warmup_s, so that the measured
    # window holds every stream.
    ramp_s: NonNegative = 0.0
    # Open loop: end a level once it is over-saturated (collectors/saturation.py's three
    # signs, checked on what has arrived and ended so far, twice running), its requests in
    # flight cancelled, so that a rate sweep does not spend minutes measuring a queue; the
    # run goes on to the next level (guidellm's --stop-over-saturated).
    stop_over_saturated: bool = False
    # After a level stops sending, how long its requests in flight may go on before they
    # are cancelled.
    drain_timeout_s: NonNegative = 10.0
    # mode = "gamma": the shape of the gaps between arrivals (1 is Poisson, < 1 burstier).
    burstiness: Positive = 1.0
    # Open loop: cap on requests in flight (0 = none).
    max_concurrency: Annotated[int, Field(ge=0)] = 0
    # Load worker processes; "auto": one per 128 streams (or 100 requests/s open loop) of
    # the highest level the run can reach (a capacity search's max_level, a fit's
    # max_streams), at least 1 and at most the usable cores.
    workers: Annotated[int, Field(ge=1)] | Literal["auto"] = "auto"
    # "asyncio": the precise engine (one event loop per worker process); "locust": Locust
    # workers under a master, on this host or several ([locust]; closed loop only).
    engine: Literal["asyncio", "locust"] = "asyncio"
    # Seed of the open-loop arrival times (each level's from seed + its index).
    seed: int = 0
    # Every level this many times, interleaved (all levels, then all again): the spread
    # between repeats is shown beside each level's own confidence interval.
    repeats: Annotated[int, Field(ge=1)] = 1

    @model_validator(mode="before")
    @classmethod
    def _bound(cls, data: Any) -> Any:
        # Without duration_s: the default duration, unless max_requests alone bounds the
        # level; then the cool-down defaults to none (a count has no known end).
        if isinstance(data, dict) and data.get("mode") == "trace":
            # A trace's requests are all measured, its duration is its own (duration_s,
            # if given, cuts it short).
            return {"warmup_s": 0.0, "cooldown_s": 0.0, **data}
        if not isinstance(data, dict) or data.get("duration_s") is not None:
            return data
        if data.get("max_requests") is None:
            return {**data, "duration_s": DEFAULT_DURATION_S}
        return {"cooldown_s": 0.0, **data}

    @property
    def count_bound(self) -> bool:
        """True when load.max_requests alone bounds each level."""
        return self.duration_s is None and self.mode != "trace"

    @property
    def level_limit_s(self) -> float:
        """How long a level may send: duration_s, or a count-bound level's safety limit."""
        return COUNT_BOUND_LIMIT_S if self.duration_s is None else self.duration_s

    @model_validator(mode="after")
    def _window(self) -> LoadSpec:
        if self.duration_s is not None and self.warmup_s + self.cooldown_s >= self.duration_s:
            raise ValueError(
                "load.warmup_s + load.cooldown_s must be less than load.duration_s "
                f"({self.warmup_s} + {self.cooldown_s} >= {self.duration_s})"
            )
        if self.count_bound:
            self._check_count_bound(self.max_requests or 0)
        if self.ramp_s > 0 and self.mode != "concurrency":
            raise ValueError(
                f"load.ramp_s spreads the streams of mode = 'concurrency' (this is "
                f"{self.mode!r}); remove it, or spread open-loop arrivals with load.burstiness"
            )
        if self.stop_over_saturated and self.mode == "concurrency":
            raise ValueError(
                "load.stop_over_saturated is for open-loop levels (load.mode = 'poisson', "
                "'gamma' or 'trace'): a closed-loop stream waits for its answer, so its level "
                "cannot over-saturate; remove it"
            )
        if self.ramp_s > self.warmup_s:
            raise ValueError(
                f"load.ramp_s ({self.ramp_s:g}) must be at most load.warmup_s "
                f"({self.warmup_s:g}): the measured window must hold every stream; "
                "lengthen the warm-up or shorten the ramp"
            )
        if self.mode == "concurrency" and any(level != int(level) for level in self.levels):
            raise ValueError(
                "load.levels must be whole numbers of streams when mode = 'concurrency'"
            )
        return self

    def _check_count_bound(self, max_requests: int) -> None:
        if self.cooldown_s > 0:
            raise ValueError(
                "load.cooldown_s must be 0 when load.max_requests alone bounds a level (no "
                "load.duration_s): a count has no known end to cool down before; remove "
                "load.cooldown_s or set load.duration_s"
            )
        if self.warmup_s >= COUNT_BOUND_LIMIT_S:
            raise ValueError(
                f"load.warmup_s must be less than {COUNT_BOUND_LIMIT_S:g} s, the safety limit "
                "of a level bounded by load.max_requests alone"
            )
        if self.mode != "concurrency":
            slowest = min(self.levels)
            expected_s = max_requests / slowest
            if expected_s > COUNT_BOUND_LIMIT_S / 2:
                raise ValueError(
                    f"load.max_requests = {max_requests} at {slowest:g} requests/s is about "
                    f"{expected_s:.0f} s of arrivals, more than half the {COUNT_BOUND_LIMIT_S:g} s "
                    "safety limit of a level bounded by its count alone; set load.duration_s"
                )


class SloSpec(_Strict):
    # Goodput counts the ok requests within every limit set. The limit on TTFT (intended
    # send time to first token); unset: none.
    ttft_s: Positive | None = None
    # The goodput limit on TPOT; unset: none. A request with fewer than 2 output tokens
    # has no TPOT and meets it.
    tpot_s: Positive | None = None
    # The goodput limit on E2E latency (intended send time to last token); unset: none.
    e2e_s: Positive | None = None


class HarnessSpec(_Strict):
    # A request not done this long after it was sent fails (error type "timeout").
    request_timeout_s: Positive = 300.0
    # A request that receives no bytes for this long fails ("stall_timeout").
    stall_timeout_s: Positive = 60.0
    # The run is invalid when the client, not the target, may have set the numbers. A load
    # worker's event-loop lag p99 above this makes the level client-bound.
    max_loop_lag_p99_s: Positive = 0.002
    # A load worker busier than this fraction of one core makes the level client-bound.
    max_cpu_fraction: Annotated[float, Field(gt=0, le=1)] = 0.9
    # Open loop without max_concurrency: sending fewer than this fraction of the scheduled
    # requests within the window makes the level client-bound.
    min_achieved_rate_ratio: Annotated[float, Field(gt=0, le=1)] = 0.95
    # Calibration's self-check only (moeperf calibrate --plant-send-delay-ms): every
    # request waits this long after its intended send before it is sent, a delay the
    # calibration must find on its send side. The synthetic target and the asyncio
    # engine only; 0 (off) for anything measured.
    planted_send_delay_s: NonNegative = 0.0


class ExportSpec(_Strict):
    """Live Prometheus export and target scraping. The Pushgateway URL is not a spec
    field (it may carry credentials, and specs are stored in the manifest): give it with
    ``--pushgateway URL`` or MOEPERF_PUSHGATEWAY_URL."""

    # Serve the run's metrics at http://127.0.0.1:PORT/metrics while it runs.
    live_metrics: bool = True
    # 0 picks a free port (printed at start); Prometheus needs a fixed one, e.g. 9464.
    metrics_port: Annotated[int, Field(ge=0, le=65535)] = 0
    # Scrape the target's own /metrics during the run (stored with the run, re-exported
    # live, and counted per level in the summary); [sweep.fit] needs it.
    scrape_target: bool = True
    # Seconds between scrapes of the target's /metrics.
    scrape_interval_s: Positive = 2.0


class GateSpec(_Strict):
    """The regression gate's settings for runs of this spec (``moeperf gate`` reads them
    from the candidate's resolved spec; its command-line flags win)."""

    # Minimum effects (the smallest change the gate fails on, a fraction) by metric class
    # or by metric, e.g. { latency_p99 = 0.20, ttft_s_p99 = 0.08, throughput = 0.05 };
    # keys not set keep the gate's defaults (collectors/min_effects.py,
    # docs/concepts/gate-statistics.md).
    min_effects: dict[str, Annotated[float, Field(ge=0, lt=1)]] = {}

    @field_validator("min_effects")
    @classmethod
    def _known_classes(cls, value: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(value) - set(MIN_EFFECT_KEYS))
        if unknown:
            raise ValueError(
                f"unknown key(s) {', '.join(map(repr, unknown))}; valid keys: "
                f"{', '.join(MIN_EFFECT_KEYS)}"
            )
        return value


# A [sampling] key set to this is not sent (the target's default). TOML has no null, so
# this is how a spec leaves out temperature, whose default (0.0, greedy) is sent.
SERVER_DEFAULT = "server-default"
_SEED_RANGE = (-(2**63), 2**63 - 1)  # int64, as servers take it


class SamplingSpec(_Strict):
    """``[sampling]``: the sampling fields of every request, sent only when set (None:
    not sent, the target's own default). The default is greedy decoding, temperature 0.0
    and nothing else, as moeperf always sent; ``seed`` is the same in every request."""

    # 0 to 2; 0.0 is greedy; "server-default" sends none.
    temperature: float | None = 0.0
    # Nucleus sampling, above 0 and at most 1; unset: not sent.
    top_p: float | None = None
    # Not an OpenAI field (vLLM, SGLang and TGI take it).
    top_k: int | None = None
    # The same seed in every request (a 64-bit integer); unset: not sent.
    seed: int | None = None

    @field_validator("temperature", "top_p", "top_k", "seed", mode="before")
    @classmethod
    def _server_default(cls, value: Any, info: ValidationInfo) -> Any:
        if value == SERVER_DEFAULT:
            return None
        if isinstance(value, str | bool):
            kind = "a number" if info.field_name in ("temperature", "top_p") else "an integer"
            raise ValueError(
                f"{info.field_name} is {kind}, or {SERVER_DEFAULT!r} to send none (the "
                "target's default)"
            )
        return value

    @field_validator("temperature")
    @classmethod
    def _temperature(cls, value: float | None) -> float | None:
        if value is not None and not 0 <= value <= 2:
            raise ValueError(f"must be from 0 to 2 (0: greedy), or {SERVER_DEFAULT!r} to send none")
        return value

    @field_validator("top_p")
    @classmethod
    def _top_p(cls, value: float | None) -> float | None:
        if value is not None and not 0 < value <= 1:
            raise ValueError(
                "must be above 0 and at most 1 (1: no nucleus cut-off); leave it out to send none"
            )
        return value

    @field_validator("top_k")
    @classmethod
    def _top_k(cls, value: int | None) -> int | None:
        if value is not None and value < 1:
            raise ValueError(
                "must be at least 1; leave it out to send none (servers differ in how "
                "they spell 'no top-k': 0 or -1)"
            )
        return value

    @field_validator("seed")
    @classmethod
    def _seed(cls, value: int | None) -> int | None:
        low, high = _SEED_RANGE
        if value is not None and not low <= value <= high:
            raise ValueError(f"must be a 64-bit integer ({low} to {high})")
        return value

    def as_sent(self) -> Sampling:
        """The record the request builder sends and the manifest stores."""
        return Sampling(self.temperature, self.top_p, self.top_k, self.seed)
