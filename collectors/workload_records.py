"""Summary records of the production-like workloads: conversation turns, trace replays,
repeated levels (computed in ``collectors.workload_summary``)."""

from __future__ import annotations

from dataclasses import dataclass

from moeperf.collectors.quantiles import Described

# How tables label each RepeatMetric.metric: (label, scale to the unit, unit).
REPEAT_METRIC_LABELS: dict[str, tuple[str, float, str]] = {
    "ttft_p50_s": ("TTFT p50", 1e3, "ms"),
    "tpot_p50_s": ("TPOT p50", 1e3, "ms"),
    "itl_p50_s": ("ITL p50", 1e3, "ms"),
    "e2e_p50_s": ("E2E p50", 1e3, "ms"),
    "output_tok_s": ("output", 1.0, "tok/s"),
}


@dataclass(frozen=True, slots=True)
class TurnSummary:
    """The measured ok requests at one turn index of a multi-turn scenario."""

    turn: int  # from 1
    requests: int
    ttft_s: Described
    # The server's usage: the history so far plus the new message, chat template included.
    prompt_tokens_mean: float | None
    # Cached prompt tokens / prompt tokens over the turn's requests, from the server's
    # usage (prompt_tokens_details.cached_tokens); None where it did not say.
    cached_ratio: float | None = None


@dataclass(frozen=True, slots=True)
class TraceReplay:
    """How closely one level replayed its trace: its sends against the trace's times.

    ``send_lag_s`` is actual send - intended send, the intended one being the request's
    recorded time divided by the speed-up (``collectors.latency``'s queue delay, for a
    trace); ``on_time_ratio`` the share of sent requests within ``ON_TIME_S`` of it.
    """

    trace_requests: int  # the trace's requests this level was to send
    sent: int
    send_lag_s: Described
    on_time_ratio: float | None
    speedup: float


@dataclass(frozen=True, slots=True)
class RepeatMetric:
    """One metric of one level over its repeats.

    ``between_*``: the 95% t-interval of the mean of the per-repeat values; ``within_half``:
    the median over repeats of each repeat's own 95% CI half-width (None where a value has
    no interval, e.g. throughput). ``dispersion_ratio`` is the standard deviation between
    repeats over the standard error one repeat's CI implies (half-width / 1.96): near 1,
    a run's own interval tells how much the next run may differ; well above 1, drift
    between runs is larger than any one run shows.
    """

    metric: str  # "ttft_p50_s", "tpot_p50_s", "itl_p50_s", "e2e_p50_s", "output_tok_s"
    values: tuple[float | None, ...]  # one per repeat, in repeat order
    mean: float | None
    between_low: float | None
    between_high: float | None
    within_half: float | None
    dispersion_ratio: float | None


@dataclass(frozen=True, slots=True)
class RepeatLevel:
    """A level run ``load.repeats`` times: "c=4" as "c=4 #1", "c=4 #2", ..."""

    level: str
    scenarios: tuple[str, ...]
    metrics: tuple[RepeatMetric, ...]
