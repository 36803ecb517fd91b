"""Each load level in the terminal: its latency table, its throughput line with the token
count check, its target counters line; and the cell and table helpers the suites' tables
share."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from moeperf.collectors.serving_records import ScenarioSummary, TokenDiscrepancy
from moeperf.collectors.target_counters import NOT_AVAILABLE, TargetCounters
from moeperf.collectors.units import ms_text


def cell(value: float | None, spec: str, scale: float = 1.0) -> str:
    """A table cell: ``value`` scaled and formatted by ``spec``, or "n/a"."""
    return "n/a" if value is None else format(value * scale, spec)


def headed_table(title: str, heads: list[str], labels: int) -> Table:
    """A table with these column heads: the first ``labels`` are labels (left, one line),
    the rest numbers (right)."""
    table = Table(title=title)
    for i, name in enumerate(heads):
        table.add_column(name, justify="left" if i < labels else "right", no_wrap=i < labels)
    return table


def latency_table(scenario: str, entry: ScenarioSummary) -> Table:
    """p50/p90/p99 (ms) with sample counts for one scenario of a summary; a level that is
    not ok says so first, with its reason (a failed level's error types and counts)."""
    verdict = "" if entry.status == "ok" else f" {entry.status.upper()} ({entry.status_reason})"
    # Text, not markup: a reason quotes the target's words.
    title = Text(
        f"{scenario}{verdict}: {entry.ok} ok / {entry.requests} requests, "
        f"{entry.errors} errors, window {entry.window_s:.1f} s"
    )
    table = Table(title=title)
    for column in ("metric", "n", "p50 ms", "p90 ms", "p99 ms", "p99 95% CI ms"):
        table.add_column(column, justify="right" if column != "metric" else "left")
    for label, stats in entry.latency_s.labelled():
        if not stats.count:
            continue
        p99 = stats.at(0.99)
        ci = (
            f"{ms_text(p99.ci_low)}-{ms_text(p99.ci_high)}"
            if p99 is not None and p99.ci_low is not None
            else "too few samples"
        )
        table.add_row(
            label,
            str(stats.count),
            ms_text(stats.value_at(0.5)),
            ms_text(stats.value_at(0.9)),
            ms_text(stats.value_at(0.99)),
            ci,
        )
    return table


def throughput_line(scenario: str, entry: ScenarioSummary) -> str:
    def fmt(value: float | None, unit: str) -> str:
        return "-" if value is None else f"{value:.1f} {unit}"

    parts = [
        f"output {fmt(entry.output_throughput_tok_s, 'tok/s')}",
        f"requests {fmt(entry.request_throughput_rps, 'req/s')}",
        f"goodput {fmt(entry.goodput_rps, 'req/s')}",
    ]
    if entry.error_types:
        parts.append("errors " + ", ".join(f"{k}={v}" for k, v in entry.error_types.items()))
    discrepancy = entry.output_token_discrepancy
    if discrepancy.compared:
        parts.append(token_count_text(discrepancy))
    return f"{scenario}: " + "; ".join(parts)


def token_count_text(d: TokenDiscrepancy) -> str:
    """The client's re-tokenized output count against the server's usage, with the reason
    it differs (docs/concepts/metrics.md)."""
    if not d.differing:
        return f"client count of the re-tokenized text equals server usage in all {d.compared}"
    text = (
        f"client count of the re-tokenized text differs from server usage in {d.differing} "
        f"of {d.compared}"
    )
    if d.client_fewer is None or d.client_more is None:  # a summary older than the split
        return text
    mean = d.mean_client_minus_server or 0.0
    text += f" ({d.client_fewer} fewer, {d.client_more} more, mean {mean:+.1f} tokens"
    if d.client_more:
        return text + "; more: the server's usage undercounts, or chunks were tokenized apart)"
    return (
        text + '; expected: re-encoding merges some generated tokens, e.g. two "\\n" as "\\n\\n")'
    )


def absent_counters(c: TargetCounters) -> list[str]:
    """What of MTP, the KV cache, preemptions and the prefix cache the target's counters
    do not give."""
    absent: list[str] = []
    if c.spec_drafts != 0 and c.spec_tokens_per_step is None and c.spec_acceptance_ratio is None:
        absent.append("MTP")
    if c.kv_usage_mean_ratio is None or c.kv_usage_max_ratio is None:
        absent.append("KV cache")
    if c.preemptions is None:
        absent.append("preemptions")
    if c.prefix_cache_hit_ratio is None and c.prefix_cache_queries != 0:
        absent.append("prefix cache")
    return absent


def cached_prompt_text(c: TargetCounters) -> str:
    """ "cached prompt tokens 768 of 1,385 (55%)": the prompt tokens the target served from
    a cache, of those it counted (vLLM)."""
    text = f"cached prompt tokens {c.prompt_tokens_cached or 0:,.0f}"
    if c.prompt_tokens is not None:
        text += f" of {c.prompt_tokens:,.0f}"
    if c.prompt_tokens_cached_ratio is not None:
        text += f" ({c.prompt_tokens_cached_ratio:.0%})"
    return text


def target_counters_line(scenario: str, entry: ScenarioSummary) -> str:
    """What the target itself counted over the level (collectors.target_counters): MTP
    acceptance and tokens per step, KV-cache usage, preemptions, prefix-cache hits, cached
    prompt tokens. (A run whose /metrics could not be read at all says so once:
    serving_lines.)"""
    c = entry.target_counters
    if c is None:
        return (
            f"{scenario} target counters: none stored (its /metrics was not scraped or unreadable)"
        )
    parts: list[str] = []
    absent = absent_counters(c)
    if c.spec_drafts == 0:
        parts.append("MTP: no drafts (off)")
    elif "MTP" not in absent:
        mtp = [f"{c.spec_tokens_per_step:.2f} tokens/verify step"] if c.spec_tokens_per_step else []
        if c.spec_acceptance_ratio is not None:
            mtp.append(f"acceptance {c.spec_acceptance_ratio:.2f}")
        if c.spec_acceptance_by_position:
            mtp.append(
                "by position " + " / ".join(f"{a:.2f}" for a in c.spec_acceptance_by_position)
            )
        parts.append("MTP " + ", ".join(mtp))
    if c.generation_tokens_per_engine_step is not None:
        parts.append(f"{c.generation_tokens_per_engine_step:.1f} tokens/engine step")
    if c.kv_usage_mean_ratio is not None and c.kv_usage_max_ratio is not None:
        kv = f"KV cache mean {c.kv_usage_mean_ratio:.0%} max {c.kv_usage_max_ratio:.0%}"
        if not c.gauge_scrapes:
            kv += " (after the level: no scrape during it, export.scrape_interval_s)"
        parts.append(kv)
    if c.preemptions is not None:
        parts.append(f"preemptions {c.preemptions:.0f}")
    if c.prefix_cache_hit_ratio is not None:
        parts.append(f"prefix-cache hit rate {c.prefix_cache_hit_ratio:.2f}")
    elif c.prefix_cache_queries == 0:
        parts.append("prefix cache: no lookups")
    if c.prompt_tokens_cached is not None:
        parts.append(cached_prompt_text(c))
    if absent:
        parts.append(f"{', '.join(absent)}: {NOT_AVAILABLE}")
    return f"{scenario} target ({c.dialect}): " + "; ".join(parts)
