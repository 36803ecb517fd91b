"""The workload side of a serving run in the report: the prefix cache per level, TTFT with
and without prefix reuse, TTFT by conversation turn, a trace's replay, and repeated levels.

The same content as the terminal's tables after a run, each block shown only where the run
has its data: the per-level cache table when some level asked for a cache reset or the
target counted prefix-cache lookups; the reuse table when a prefix workload ran its
no-reuse control levels ("X unique" beside "X"); the turn table and chart for a multi-turn
workload; the trace table and chart for a trace replay; the repeats table when levels ran
``load.repeats`` times. Definitions: ``collectors.workload_summary`` (turns, send lag,
between repeats) and ``collectors.target_counters`` (the hit rate).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from moeperf.collectors.quantiles import QuantileEstimate
from moeperf.collectors.reuse_pairs import reuse_pairs
from moeperf.collectors.serving_records import ScenarioSummary, ServingSummary
from moeperf.collectors.target_counters import NOT_AVAILABLE
from moeperf.collectors.workload_records import REPEAT_METRIC_LABELS, RepeatLevel
from moeperf.collectors.workload_summary import ON_TIME_S
from moeperf.reports.figures.trace_replay import arrival_series, trace_replay_chart
from moeperf.reports.figures.turns import turns_chart
from moeperf.reports.render import Chart, Table
from moeperf.reports.target_counters import NOT_SCRAPED
from moeperf.reports.target_text import repeats_suffix

NOT_ASKED = "not asked (workload.cache = 'reuse')"
CACHED_SHARE = "cached prompt share = prompt tokens it served from a cache / its prompt tokens; "


def _ms(estimate: QuantileEstimate | None) -> float | None:
    return None if estimate is None else estimate.value * 1e3


def _ci_ms(estimate: QuantileEstimate | None) -> str:
    if estimate is None:
        return "-"
    if estimate.ci_low is None or estimate.ci_high is None:
        return "too few samples"
    return f"{estimate.ci_low * 1e3:,.1f} - {estimate.ci_high * 1e3:,.1f}"


def _share(value: float | None, absent: str = "-") -> str:
    return absent if value is None else f"{value:.1%}"


def hit_rate(entry: ScenarioSummary) -> str:
    """The level's prefix-cache hit rate from the target's counters, or why there is none."""
    counters = entry.target_counters
    if counters is None:
        return NOT_SCRAPED
    if counters.prefix_cache_hit_ratio is None:
        return "no lookups" if counters.prefix_cache_queries == 0 else NOT_AVAILABLE
    return _share(counters.prefix_cache_hit_ratio)


def _cache_before(entry: ScenarioSummary) -> str:
    if entry.cache_reset is None:
        return NOT_ASKED
    return f"reset ({entry.cache_reset})" if entry.cache_reset_done else entry.cache_reset


def _has_prefix_counters(entry: ScenarioSummary) -> bool:
    c = entry.target_counters
    return c is not None and (
        c.prefix_cache_hit_ratio is not None or c.prefix_cache_queries is not None
    )


def cache_table(scenarios: Mapping[str, ScenarioSummary]) -> Table | None:
    """Every level's TTFT beside its hit rate and the cache's state before it; None when
    no level asked for a reset and the target counted no prefix-cache lookups."""
    entries = scenarios.values()
    if not any(e.cache_reset is not None or _has_prefix_counters(e) for e in entries):
        return None
    cached = any(
        e.target_counters is not None and e.target_counters.prompt_tokens_cached is not None
        for e in entries
    )
    rows: list[dict[str, Any]] = []
    for name, entry in scenarios.items():
        row: dict[str, Any] = {
            "scenario": name,
            "TTFT p50 ms": _ms(entry.latency_s.ttft_s.at(0.5)),
            "TTFT p50 95% CI ms": _ci_ms(entry.latency_s.ttft_s.at(0.5)),
            "prefix-cache hit rate": hit_rate(entry),
        }
        if cached:  # the target counts the prompt tokens it served from a cache (vLLM)
            row["cached prompt share"] = _cached_share(entry)
        rows.append({**row, "cache before the level": _cache_before(entry)})
    return Table(
        pd.DataFrame(rows),
        "Prefix cache per level: hit rate = prompt tokens the target found in its prefix "
        "cache / prompt tokens it looked up, over the level (its counters' increase, warm-up "
        "and cool-down included; SGLang: its hit-rate gauge); "
        + (CACHED_SHARE if cached else "")
        + "reset: the cache was emptied before the level (workload.cache = 'fresh'), and how.",
    )


def _cached_share(entry: ScenarioSummary) -> str:
    counters = entry.target_counters
    if counters is None:
        return NOT_SCRAPED
    return _share(counters.prompt_tokens_cached_ratio, NOT_AVAILABLE)


def reuse_table(scenarios: Mapping[str, ScenarioSummary]) -> Table | None:
    """TTFT with shared prefixes against the same lengths without; None without pairs."""
    pairs = reuse_pairs(scenarios)
    if not pairs:
        return None
    rows: list[dict[str, Any]] = []
    for shared, unique in pairs:
        with_p50 = scenarios[shared].latency_s.ttft_s.at(0.5)
        without_p50 = scenarios[unique].latency_s.ttft_s.at(0.5)
        ratio = None
        if with_p50 is not None and without_p50 is not None and without_p50.value > 0:
            ratio = with_p50.value / without_p50.value
        rows.append(
            {
                "level": shared,
                "TTFT p50 with ms": _ms(with_p50),
                "with 95% CI ms": _ci_ms(with_p50),
                "hit rate with": _reuse_hit_rate(scenarios[shared]),
                "TTFT p50 without ms": _ms(without_p50),
                "without 95% CI ms": _ci_ms(without_p50),
                "hit rate without": _reuse_hit_rate(scenarios[unique]),
                "ratio (with / without)": ratio,
            }
        )
    return Table(
        pd.DataFrame(rows),
        'TTFT with prefix reuse against without: without, the control level ("... '
        'unique"), prompts of the same lengths that share no prefix; ratio: TTFT p50 with / '
        "without (below 1: the shared prefixes saved prefill time).",
    )


def _reuse_hit_rate(entry: ScenarioSummary) -> str:
    """The level's hit rate, and its repeated prompts where it had any."""
    return hit_rate(entry) + repeats_suffix(entry)


def turn_blocks(scenarios: Mapping[str, ScenarioSummary]) -> list[Chart | Table]:
    """TTFT by turn index of every multi-turn level, table and chart; none without turns."""
    rows = [
        {
            "scenario": name,
            "turn": turn.turn,
            "requests": turn.requests,
            "prompt tokens (mean)": turn.prompt_tokens_mean,
            "cached (server usage)": _share(turn.cached_ratio, NOT_AVAILABLE),
            "TTFT p50 ms": _ms(turn.ttft_s.at(0.5)),
            "TTFT p50 95% CI ms": _ci_ms(turn.ttft_s.at(0.5)),
        }
        for name, entry in scenarios.items()
        for turn in entry.turns
    ]
    if not rows:
        return []
    return [
        Table(
            pd.DataFrame(rows),
            "TTFT by conversation turn, measured ok requests: turn k sends the history so far "
            "(k - 1 user messages and replies) plus a new message; prompt tokens: the "
            "server's count, chat template included; cached: prompt tokens its prefix cache "
            "held / prompt tokens (its usage's prompt_tokens_details.cached_tokens).",
        ),
        Chart(
            turns_chart(scenarios),
            "Top: TTFT p50 by turn index, one line per level, with its 95% interval; bottom: "
            "the share of each turn's prompt tokens the server said were cached.",
            drawn_by=("turns",),
        ),
    ]


def trace_blocks(
    scenarios: Mapping[str, ScenarioSummary], requests: pd.DataFrame
) -> list[Chart | Table]:
    """How each trace level kept to the trace's times, table and chart; none without one."""
    rows = []
    for name, entry in scenarios.items():
        replay = entry.trace_replay
        if replay is None:
            continue
        p50, p99 = replay.send_lag_s.value_at(0.5), replay.send_lag_s.value_at(0.99)
        rows.append(
            {
                "scenario": name,
                "speed-up": replay.speedup,
                "trace requests": replay.trace_requests,
                "sent": replay.sent,
                "send lag p50 ms": None if p50 is None else p50 * 1e3,
                "send lag p99 ms": None if p99 is None else p99 * 1e3,
                "on time": _share(replay.on_time_ratio),
            }
        )
    if not rows:
        return []
    names = [name for name, entry in scenarios.items() if entry.trace_replay is not None]
    return [
        Table(
            pd.DataFrame(rows),
            f"Trace replay, sends against the trace's times (every request of the level): "
            f"send lag = actual send - the trace's time / speed-up; on time: within "
            f"{ON_TIME_S * 1e3:g} ms.",
        ),
        Chart(
            trace_replay_chart(arrival_series(requests, names)),
            "Left: requests per bin by the trace's times, scaled by the speed-up (dashed), "
            "and as actually sent (solid); right: the send lag's distribution.",
            drawn_by=("trace_replay",),
        ),
    ]


def repeats_table(levels: tuple[RepeatLevel, ...]) -> Table | None:
    """Each repeated level's metrics: per repeat, between repeats, within one run."""
    rows: list[dict[str, Any]] = []
    for level in levels:
        for metric in level.metrics:
            label, scale, unit = REPEAT_METRIC_LABELS.get(metric.metric, (metric.metric, 1.0, ""))

            def scaled(value: float | None, scale: float = scale) -> float | None:
                return None if value is None else value * scale

            between = "-"
            if metric.between_low is not None and metric.between_high is not None:
                between = f"{metric.between_low * scale:,.2f} - {metric.between_high * scale:,.2f}"
            rows.append(
                {
                    "level": level.level,
                    "metric": f"{label} ({unit})" if unit else label,
                    "per repeat": ", ".join(
                        "-" if v is None else f"{v * scale:,.2f}" for v in metric.values
                    ),
                    "mean": scaled(metric.mean),
                    "between repeats (95%)": between,
                    "within one run ±": scaled(metric.within_half),
                    "dispersion": metric.dispersion_ratio,
                }
            )
    if not rows:
        return None
    return Table(
        pd.DataFrame(rows),
        "Repeats, the spread between runs of a level beside each run's own interval: per "
        "repeat, the metric of each repeat in order; between: the 95% t-interval of the mean "
        "of the per-repeat values; within ±: the median over repeats of each repeat's own "
        "95% CI half-width (none for throughput, which has no interval); dispersion: the "
        "standard deviation between repeats / the standard error one repeat's CI implies "
        "(half-width / 1.96): near 1, a run's own interval tells how much the next run may "
        "differ; well above 1, drift between runs is larger than any one run shows.",
    )


def workload_blocks(summary: ServingSummary, requests: pd.DataFrame) -> list[Chart | Table]:
    """The workload blocks ``summary`` has data for, in the terminal's order."""
    scenarios = summary.scenarios
    blocks: list[Chart | Table] = []
    for table in (cache_table(scenarios), reuse_table(scenarios)):
        if table is not None:
            blocks.append(table)
    blocks += turn_blocks(scenarios)
    blocks += trace_blocks(scenarios, requests)
    repeats = repeats_table(summary.repeats)
    if repeats is not None:
        blocks.append(repeats)
    return blocks
