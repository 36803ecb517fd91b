"""Turn, trace-replay and repeat summaries of a serving run, from its request records.

Definitions (quoted by the docs' metric definitions page and every report's appendix):
- TTFT by turn: the TTFT of a multi-turn scenario's measured ok requests, grouped by their
  turn index in the conversation (1 = the first message).
- Send lag of a trace replay: actual send time - the trace's time / speed-up; on time:
  within ``ON_TIME_S`` (5 ms).
- Between repeats (``--repeat N``): the per-repeat values of a metric (a level's p50s, its
  output tokens/s), their mean and the 95% t-interval of that mean (scipy's t
  distribution, n - 1 degrees of freedom); within: the median half-width of each repeat's
  own 95% interval; dispersion: the standard deviation between repeats / (within / 1.96),
  how much wider the spread between runs is than one run's interval implies.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Mapping

import pandas as pd

from moeperf.collectors.latency import NS_PER_S, per_request
from moeperf.collectors.quantiles import Described, describe
from moeperf.collectors.serving_records import ScenarioSummary
from moeperf.collectors.workload_records import RepeatLevel, RepeatMetric, TraceReplay, TurnSummary

ON_TIME_S = 0.005
_REPEAT = re.compile(r"^(?P<level>.+) #(?P<repeat>\d+)$")


def turn_summaries(requests: pd.DataFrame) -> tuple[TurnSummary, ...]:
    """One summary per turn index of one scenario's requests (none: not multi-turn)."""
    if "turn" not in requests or requests["turn"].isna().all():
        return ()
    measured = requests[requests["phase"] == "measure"]
    metrics = per_request(measured)
    metrics["turn"] = measured["turn"].to_numpy()
    metrics["prompt_tokens"] = measured["prompt_tokens"].to_numpy()
    metrics["cached"] = measured["cached_prompt_tokens"].to_numpy()
    ok = metrics[(metrics["status"] == "ok") & metrics["turn"].notna()]
    out = []
    for turn in sorted(int(t) for t in ok["turn"].unique()):
        group = ok[ok["turn"] == turn]
        prompts = group["prompt_tokens"].dropna()
        told = group.dropna(subset=["prompt_tokens", "cached"])
        total = float(told["prompt_tokens"].sum())
        out.append(
            TurnSummary(
                turn=turn,
                requests=len(group),
                ttft_s=describe(group["ttft_s"]),
                prompt_tokens_mean=float(prompts.mean()) if len(prompts) else None,
                cached_ratio=float(told["cached"].sum()) / total if total > 0 else None,
            )
        )
    return tuple(out)


def trace_replay(requests: pd.DataFrame, trace_requests: int, speedup: float) -> TraceReplay:
    """How one trace level's sends kept to the trace (every request of it, any phase)."""
    sent = requests[requests["send_ns"] > 0]
    lag_s = (sent["send_ns"] - sent["intended_send_ns"]) / NS_PER_S
    return TraceReplay(
        trace_requests=trace_requests,
        sent=len(sent),
        send_lag_s=describe(lag_s),
        on_time_ratio=float((lag_s.abs() <= ON_TIME_S).mean()) if len(sent) else None,
        speedup=speedup,
    )


def repeat_base(scenario: str) -> tuple[str, int] | None:
    """("c=4", 2) for "c=4 #2"; None for a scenario that is not a repeat."""
    match = _REPEAT.match(scenario)
    return (match["level"], int(match["repeat"])) if match else None


def repeat_levels(scenarios: Mapping[str, ScenarioSummary]) -> tuple[RepeatLevel, ...]:
    """Every level that ran more than once, with its metrics over the repeats."""
    by_level: dict[str, list[str]] = {}
    for name in scenarios:
        base = repeat_base(name)
        if base is not None:
            by_level.setdefault(base[0], []).append(name)
    return tuple(
        RepeatLevel(level, tuple(names), _metrics([scenarios[n] for n in names]))
        for level, names in by_level.items()
        if len(names) > 1
    )


def _metrics(runs: list[ScenarioSummary]) -> tuple[RepeatMetric, ...]:
    def p50(described: Described) -> tuple[float | None, float | None]:
        estimate = described.at(0.5)
        if estimate is None:
            return None, None
        half = None
        if estimate.ci_low is not None and estimate.ci_high is not None:
            half = (estimate.ci_high - estimate.ci_low) / 2
        return estimate.value, half

    rows: dict[str, list[tuple[float | None, float | None]]] = {
        "ttft_p50_s": [p50(r.latency_s.ttft_s) for r in runs],
        "tpot_p50_s": [p50(r.latency_s.tpot_s) for r in runs],
        "itl_p50_s": [p50(r.latency_s.itl_s) for r in runs],
        "e2e_p50_s": [p50(r.latency_s.e2e_s) for r in runs],
        "output_tok_s": [(r.output_throughput_tok_s, None) for r in runs],
    }
    return tuple(_metric(name, pairs) for name, pairs in rows.items())


def _metric(name: str, pairs: list[tuple[float | None, float | None]]) -> RepeatMetric:
    values = tuple(v for v, _ in pairs)
    known = [v for v in values if v is not None]
    halves = [h for _, h in pairs if h is not None]
    mean = statistics.fmean(known) if known else None
    low = high = ratio = None
    within = statistics.median(halves) if halves else None
    if len(known) >= 2 and mean is not None:
        from scipy import stats  # a second to import: only for repeated runs

        sd = statistics.stdev(known)
        margin = float(stats.t.ppf(0.975, len(known) - 1)) * sd / math.sqrt(len(known))
        low, high = mean - margin, mean + margin
        if within:
            ratio = sd / (within / 1.96)
    return RepeatMetric(name, values, mean, low, high, within, ratio)
