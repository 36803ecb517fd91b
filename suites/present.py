"""Presenting runs in the terminal with rich: progress while running, tables after."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from moeperf.collectors.serving_records import ScenarioSummary, ServingSummary, TokenDiscrepancy
from moeperf.collectors.store import RunWriter
from moeperf.collectors.target_counters import NOT_AVAILABLE
from moeperf.suites.run_options import Progress as RunProgress

if TYPE_CHECKING:
    from moeperf.suites.serving.level_plan import LevelOutcome


@dataclass(frozen=True, slots=True)
class ErrorBudget:
    """How far the harness's median TTFT and ITL error may be from the server's times."""

    ttft_p50_s: float
    itl_p50_s: float


class ProgressBar(RunProgress):
    """A bar per load level: time through the level, requests done and failed."""

    def __init__(self, console: Console):
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[done]} done, {task.fields[failed]} failed"),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        )
        self._task: TaskID | None = None  # the current level's bar
        self._started = 0.0
        self._console = console

    def level_started(self, scenario: str, duration_s: float) -> None:
        if self._task is None:
            self._progress.start()
        self._task = self._progress.add_task(scenario, total=duration_s, done=0, failed=0)
        self._started = time.monotonic()

    def finished(self, status: str) -> None:
        task = self._progress.tasks[-1]
        failed = task.fields["failed"] + (status == "error")
        self._progress.update(task.id, done=task.fields["done"] + 1, failed=failed)
        self.tick()

    def tick(self) -> None:
        if self._task is not None:
            self._progress.update(self._task, completed=time.monotonic() - self._started)

    def level_done(self, outcome: LevelOutcome) -> None:
        task = self._progress.tasks[-1]
        self._progress.update(task.id, completed=task.total)
        if outcome.verdict.status == "failed":
            line = f"{outcome.scenario}: failed: {outcome.verdict.reason}"
            self._console.print(Text(line, style="red"))
        for reason in outcome.invalid_reasons:
            self._console.print(f"[yellow]{outcome.scenario}: client bottleneck: {reason}")

    def close(self) -> None:
        if self._task is not None:
            self._progress.stop()


def announce_run(run: RunWriter, console: Console) -> None:
    """Say where a run's results go, before any load is sent."""
    console.print(f"run {run.run_id} -> {run.directory}")


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


def _ms(value: float | None, decimals: int = 2) -> str:
    return "-" if value is None else f"{value * 1e3:.{decimals}f}"


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
            f"{_ms(p99.ci_low)}-{_ms(p99.ci_high)}"
            if p99 is not None and p99.ci_low is not None
            else "too few samples"
        )
        table.add_row(
            label,
            str(stats.count),
            _ms(stats.value_at(0.5)),
            _ms(stats.value_at(0.9)),
            _ms(stats.value_at(0.99)),
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
    it differs (README, "Token counts")."""
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


def target_counters_line(
    scenario: str, entry: ScenarioSummary, unavailable: str | None = None
) -> str:
    """What the target itself counted over the level (collectors.target_counters): MTP
    acceptance and tokens per step, KV-cache usage, preemptions, prefix-cache hits.
    ``unavailable``: why the target's /metrics could not be read at all in this run."""
    c = entry.target_counters
    if c is None and unavailable is not None:
        return f"{scenario} target counters: not available ({unavailable})"
    if c is None:
        return (
            f"{scenario} target counters: none stored (its /metrics was not scraped or unreadable)"
        )
    parts: list[str] = []
    absent: list[str] = []
    if c.spec_drafts == 0:
        parts.append("MTP: no drafts (off)")
    elif c.spec_tokens_per_step is None and c.spec_acceptance_ratio is None:
        absent.append("MTP")
    else:
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
    else:
        absent.append("KV cache")
    if c.preemptions is not None:
        parts.append(f"preemptions {c.preemptions:.0f}")
    else:
        absent.append("preemptions")
    if c.prefix_cache_hit_ratio is not None:
        parts.append(f"prefix-cache hit rate {c.prefix_cache_hit_ratio:.2f}")
    elif c.prefix_cache_queries == 0:
        parts.append("prefix cache: no lookups")
    else:
        absent.append("prefix cache")
    if absent:
        parts.append(f"{', '.join(absent)}: {NOT_AVAILABLE}")
    return f"{scenario} target ({c.dialect}): " + "; ".join(parts)


def harness_error_table(summary: ServingSummary, budget: ErrorBudget) -> Table:
    """The harness's own TTFT and ITL error against the synthetic server's write times."""
    table = Table(title="harness measurement error vs the server's write times (ms)")
    columns = (
        "load",
        "matched",
        "TTFT p50",
        "TTFT p99",
        "ITL p50",
        "ITL p99",
        "loop lag p99",
        "client CPU",
        "verdict",
    )
    for column in columns:
        table.add_column(column, justify="right")
    for scenario, entry in summary.scenarios.items():
        errors = entry.harness_error_s
        if errors is None:
            continue
        lag = max(h.selfwatch.loop_lag_p99_s for h in entry.harness)
        cpu = max(h.selfwatch.cpu_fraction for h in entry.harness)
        verdict = calibration_verdict(entry, budget)
        table.add_row(
            scenario,
            str(errors.matched_requests),
            _ms(errors.ttft.value_at(0.5), 3),
            _ms(errors.ttft.value_at(0.99), 3),
            _ms(errors.itl.value_at(0.5), 3),
            _ms(errors.itl.value_at(0.99), 3),
            _ms(lag, 3),
            f"{cpu:.0%}",
            verdict,
        )
    return table


def calibration_verdict(entry: ScenarioSummary, budget: ErrorBudget) -> str:
    """ "within budget", "over budget" or "invalid: ..." for one calibration level."""
    if entry.client_bottleneck:
        return "invalid (client-bound)"
    errors = entry.harness_error_s
    if errors is None or not errors.ttft.count:
        return "no samples"
    ttft_p50 = errors.ttft.value_at(0.5) or 0.0
    itl_p50 = errors.itl.value_at(0.5) or 0.0  # no ITL samples: no error to speak of
    if abs(ttft_p50) <= budget.ttft_p50_s and abs(itl_p50) <= budget.itl_p50_s:
        return "within budget"
    return "over budget"
