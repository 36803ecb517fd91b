"""The terminal tables of an accuracy run (``moeperf run accuracy``, ``moeperf runs show``):
the figures against their thresholds with the verdict, then one row per prompt."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from moeperf.collectors.accuracy_records import AccuracySummary, Figure
from moeperf.collectors.store import RunReader
from moeperf.reports.terminal.presentation import Presentation

_STYLES = {"pass": "green", "fail": "bold red", "not available": "yellow"}


def _num(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def _threshold(figure: Figure) -> str:
    if figure.comparison.startswith("within"):
        return f"within 1/{figure.threshold:g} .. {figure.threshold:g}"
    return f"{figure.comparison} {figure.threshold:g}"


def figures_table(summary: AccuracySummary) -> Table:
    verdict = summary.verdict.upper()
    title = Text(
        f"accuracy: {verdict} ({summary.positions} output positions, top-{summary.top_k}; "
        f"reference {summary.reference.implementation}, {summary.reference.dtype}; target "
        f"{summary.target_dtype or 'dtype not stated'})"
    )
    table = Table(title=title)
    for column in ("figure", "value", "threshold", "verdict"):
        table.add_column(column, justify="right" if column == "value" else "left")
    for f in summary.figures:
        status = Text(f.status, style=_STYLES[f.status])
        if f.reason:
            status.append(f" ({f.reason})", style="")
        table.add_row(f.name, _num(f.value), _threshold(f), status)
    return table


def detail_lines(summary: AccuracySummary) -> list[str]:
    """Perplexity, KL and the load pass in words."""
    lines = [f"KL per position (nats): mean {_num(summary.mean_kl)}, max {_num(summary.max_kl)}"]
    ppl = summary.perplexity
    if ppl is not None:
        lines.append(
            f"held-out perplexity over {ppl.scored_tokens} tokens: reference "
            f"{ppl.reference:.4f}, target {_num(ppl.target, 6)}"
            + (f" (from {ppl.source})" if ppl.source else "")
        )
    load = summary.load
    if load is not None:
        starts = ", ".join(str(p) for p in load.first_divergences) or "none"
        counters = (
            f"; the target preempted {load.preemptions} and served "
            f"{load.prefix_cache_hit_tokens} prompt tokens from its prefix cache meanwhile"
            if load.preemptions is not None
            else ""
        )
        lines.append(
            f"under load ({load.concurrency} at once): {load.diverged}/{load.prompts} prompts "
            f"diverged ({load.diverged_at_ties} at ties), starting at positions {starts}; max "
            f"|delta logprob| {_num(load.max_abs_logprob_delta)}{counters}"
        )
    return lines


def prompts_table(summary: AccuracySummary) -> Table:
    table = Table(title="per prompt (positions 0-based)")
    columns = (
        "prompt", "tokens in/out", "agreement", "first disagreement", "mean KL", "max KL",
        "max |dlogprob| ref", "load: diverged at", "load max |dlogprob|",
    )  # fmt: skip
    for column in columns:
        table.add_column(column, justify="left" if column == "prompt" else "right")
    for r in summary.prompts:
        diverged = "-" if r.load_diverged is None else "no"
        if r.load_diverged:
            diverged = f"{r.load_first_divergence}" + (" (tie)" if r.load_divergence_at_tie else "")
        table.add_row(
            r.prompt_id,
            f"{r.prompt_tokens}/{r.output_tokens}",
            _num(r.top1_agreement),
            "-" if r.first_disagreement is None else str(r.first_disagreement),
            _num(r.mean_kl, 3),
            _num(r.max_kl, 3),
            _num(r.max_abs_logprob_diff, 3),
            diverged,
            _num(r.load_max_abs_logprob_delta, 3),
        )
    return table


def accuracy_tables(summary: AccuracySummary) -> list[Table | str]:
    return [figures_table(summary), *detail_lines(summary), prompts_table(summary)]


def accuracy_lines(summary: AccuracySummary, reader: RunReader) -> Presentation:
    """What ``moeperf runs show`` prints of an accuracy run: the figures against their
    thresholds and the verdict (the answer); KL, perplexity and the load pass in words,
    and one row per prompt (detail)."""
    return Presentation(
        answer=[figures_table(summary)], detail=[*detail_lines(summary), prompts_table(summary)]
    )
