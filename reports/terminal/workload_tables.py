"""The workload side of a serving run for the terminal: the prefix cache per level, TTFT
with and without reuse, TTFT by conversation turn, a trace's replay, repeats."""

from __future__ import annotations

from collections.abc import Mapping

from rich.table import Table

from moeperf.collectors.reuse_pairs import reuse_pairs
from moeperf.collectors.serving_records import ScenarioSummary
from moeperf.collectors.target_counters import NOT_AVAILABLE
from moeperf.collectors.workload_records import REPEAT_METRIC_LABELS, RepeatLevel
from moeperf.collectors.workload_summary import ON_TIME_S
from moeperf.reports.target_text import repeats_suffix
from moeperf.reports.terminal.cells import DASH, ms_cell


def hit_rate_cell(entry: ScenarioSummary) -> str:
    """The level's prefix-cache hit rate from the target's counters, or why there is none."""
    counters = entry.target_counters
    if counters is None or (
        counters.prefix_cache_hit_ratio is None and counters.prefix_cache_queries != 0
    ):
        return NOT_AVAILABLE
    if counters.prefix_cache_hit_ratio is None:
        return "no lookups"
    return f"{counters.prefix_cache_hit_ratio:.1%}"


def _reset_cell(entry: ScenarioSummary) -> str:
    if entry.cache_reset is None:
        return "not asked (workload.cache = 'reuse')"
    return "reset" if entry.cache_reset_done else entry.cache_reset


def cached_share_cell(entry: ScenarioSummary) -> str:
    """The share of the level's prompt tokens the target served from a cache (vLLM)."""
    counters = entry.target_counters
    if counters is None or counters.prompt_tokens_cached_ratio is None:
        return NOT_AVAILABLE
    return f"{counters.prompt_tokens_cached_ratio:.1%}"


def has_cached_prompts(scenarios: Mapping[str, ScenarioSummary]) -> bool:
    """Whether the target counted cached prompt tokens at some level (vLLM does)."""
    return any(
        e.target_counters is not None and e.target_counters.prompt_tokens_cached is not None
        for e in scenarios.values()
    )


def cache_table(scenarios: Mapping[str, ScenarioSummary]) -> Table:
    """Every level's TTFT beside the prefix-cache hit rate the target counted over it (and
    the cached share of its prompt tokens, where the target counts them)."""
    cached = has_cached_prompts(scenarios)
    share = "cached share: prompt tokens it served from a cache / its prompt tokens; "
    table = Table(
        title="prefix cache per level",
        caption="hit rate: prompt tokens the target found in its prefix cache / prompt "
        "tokens it looked up, over the level (its counters' increase); "
        + (share if cached else "")
        + "reset: the cache emptied before the level",
    )
    heads = ["scenario", "TTFT p50 ms [95% CI]", "hit rate"]
    heads += [*(["cached share"] if cached else []), "cache before the level"]
    for column in heads:
        table.add_column(column, justify="left" if column == "scenario" else "right")
    for name, entry in scenarios.items():
        cells = [name, ms_cell(entry.latency_s.ttft_s.at(0.5)), hit_rate_cell(entry)]
        cells += [*([cached_share_cell(entry)] if cached else []), _reset_cell(entry)]
        table.add_row(*cells)
    return table


def reuse_table(scenarios: Mapping[str, ScenarioSummary]) -> Table | None:
    """TTFT with shared prefixes against the same lengths without ("... unique"); None
    when the run has no such pairs."""
    pairs = [(unique, shared) for shared, unique in reuse_pairs(scenarios)]
    if not pairs:
        return None
    table = Table(
        title="TTFT with prefix reuse against without",
        caption="without: prompts of the same lengths that share no prefix (the control "
        "level); ratio: TTFT p50 with / without",
    )
    for column in ("level", "TTFT p50 with", "hit rate with", "TTFT p50 without",
                   "hit rate without", "ratio"):  # fmt: skip
        table.add_column(column, justify="left" if column == "level" else "right")
    for unique, shared in pairs:
        with_p50 = scenarios[shared].latency_s.ttft_s.at(0.5)
        without_p50 = scenarios[unique].latency_s.ttft_s.at(0.5)
        ratio = DASH
        if with_p50 is not None and without_p50 is not None and without_p50.value > 0:
            ratio = f"{with_p50.value / without_p50.value:.2f}"
        table.add_row(
            shared,
            ms_cell(with_p50),
            _reuse_hit_rate_cell(scenarios[shared]),
            ms_cell(without_p50),
            _reuse_hit_rate_cell(scenarios[unique]),
            ratio,
        )
    return table


def _reuse_hit_rate_cell(entry: ScenarioSummary) -> str:
    """The level's hit rate, and its repeated prompts where it had any."""
    return hit_rate_cell(entry) + repeats_suffix(entry)


def turns_table(scenarios: Mapping[str, ScenarioSummary]) -> Table | None:
    """TTFT by turn index of every multi-turn level; None without conversations."""
    if not any(entry.turns for entry in scenarios.values()):
        return None
    table = Table(
        title="TTFT by conversation turn",
        caption="turn k sends the history so far (k - 1 user messages and replies) plus a "
        "new message; prompt tokens: the server's count, chat template included",
    )
    columns = ("scenario", "turn", "requests", "prompt tokens (mean)", "cached (server usage)",
               "TTFT p50 ms [95% CI]")  # fmt: skip
    for column in columns:
        table.add_column(column, justify="left" if column == "scenario" else "right")
    for name, entry in scenarios.items():
        for turn in entry.turns:
            tokens = DASH if turn.prompt_tokens_mean is None else f"{turn.prompt_tokens_mean:,.0f}"
            cached = NOT_AVAILABLE if turn.cached_ratio is None else f"{turn.cached_ratio:.1%}"
            table.add_row(name, str(turn.turn), str(turn.requests), tokens, cached,
                          ms_cell(turn.ttft_s.at(0.5)))  # fmt: skip
    return table


def trace_table(scenarios: Mapping[str, ScenarioSummary]) -> Table | None:
    """How each trace level kept to the trace's times; None without a trace."""
    replays = [(name, e.trace_replay) for name, e in scenarios.items() if e.trace_replay]
    if not replays:
        return None
    table = Table(
        title="trace replay: sends against the trace's times",
        caption=f"send lag: actual send - recorded time / speed-up; on time: within "
        f"{ON_TIME_S * 1e3:g} ms",
    )
    for column in ("scenario", "speed-up", "trace requests", "sent", "send lag p50 ms",
                   "send lag p99 ms", "on time"):  # fmt: skip
        table.add_column(column, justify="left" if column == "scenario" else "right")
    for name, replay in replays:
        assert replay is not None
        p50 = replay.send_lag_s.value_at(0.5)
        p99 = replay.send_lag_s.value_at(0.99)
        table.add_row(
            name,
            f"{replay.speedup:g}",
            str(replay.trace_requests),
            str(replay.sent),
            DASH if p50 is None else f"{p50 * 1e3:.2f}",
            DASH if p99 is None else f"{p99 * 1e3:.2f}",
            DASH if replay.on_time_ratio is None else f"{replay.on_time_ratio:.1%}",
        )
    return table


def repeats_table(levels: tuple[RepeatLevel, ...]) -> Table | None:
    """Each repeated level's metrics: per repeat, between repeats, within one run."""
    if not levels:
        return None
    table = Table(
        title="repeats: the spread between runs beside each run's own interval",
        caption="between: 95% t-interval of the mean over repeats; within: median half-width "
        "of each repeat's own 95% CI; dispersion: SD between repeats / the standard error "
        "one repeat's CI implies (well above 1: runs differ more than one run shows)",
    )
    for column in ("level", "metric", "per repeat", "mean", "between (95%)", "within ±",
                   "dispersion"):  # fmt: skip
        table.add_column(column, justify="left" if column in ("level", "metric") else "right")
    for level in levels:
        for metric in level.metrics:
            label, scale, unit = REPEAT_METRIC_LABELS[metric.metric]

            def cell(value: float | None, scale: float = scale) -> str:
                return DASH if value is None else f"{value * scale:,.2f}"

            between = DASH
            if metric.between_low is not None and metric.between_high is not None:
                between = f"{cell(metric.between_low)} - {cell(metric.between_high)}"
            table.add_row(
                level.level,
                f"{label} ({unit})",
                ", ".join(cell(v) for v in metric.values),
                cell(metric.mean),
                between,
                cell(metric.within_half),
                DASH if metric.dispersion_ratio is None else f"{metric.dispersion_ratio:.1f}",
            )
    return table


def workload_tables(
    scenarios: Mapping[str, ScenarioSummary], repeats: tuple[RepeatLevel, ...]
) -> list[Table]:
    """The tables a run has data for: reuse against none, turns, a trace's replay, repeats
    (the per-level cache table is ``cache_table``, shown where it says something)."""
    tables = (reuse_table(scenarios), turns_table(scenarios), trace_table(scenarios),
              repeats_table(repeats))  # fmt: skip
    return [table for table in tables if table is not None]
