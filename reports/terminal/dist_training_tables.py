"""The training-dist suite's tables (rich), from a run's summary (``DistTrainingSummary``).

Presenting only: every number is a summary field, scaled. All measured, none simulated.
"""

from __future__ import annotations

from rich.table import Table

from moeperf.collectors.dist_training_summary import DistTrainingSummary
from moeperf.collectors.store import RunReader
from moeperf.reports.terminal.levels import cell, headed_table
from moeperf.reports.terminal.presentation import Presentation

MIB = 2**20


def layout_table(summary: DistTrainingSummary) -> Table:
    table = headed_table(
        "Distributed training (measured): per layout, policy and skew",
        [
            "layout",
            "policy",
            "skew",
            "ranks",
            "steps",
            "tokens/s",
            "eff. tokens/s",
            "MFU",
            "comm",
            "all-to-all",
            "send/recv",
            "all-reduce",
            "wait",
            "bubble",
            "(p-1)/(m+p-1)",
            "peak MiB by rank",
            "OOM rate",
        ],
        3,
    )
    for s in summary.scenarios.values():
        sh = s.shares
        table.add_row(
            s.layout,
            s.policy,
            s.skew,
            str(s.world_size),
            str(s.steps),
            cell(s.tokens_per_s, ",.0f"),
            cell(s.effective_tokens_per_s, ",.0f"),
            cell(s.mfu, ".1%"),
            cell(sh.communication if sh else None, ".1%"),
            cell(sh.all_to_all if sh else None, ".1%"),
            cell(sh.pipeline if sh else None, ".1%"),
            cell(sh.all_reduce if sh else None, ".1%"),
            cell(sh.wait if sh else None, ".1%"),
            cell(s.bubble, ".1%"),
            f"{s.bubble_formula:.1%}",
            " ".join(f"{b / MIB:.0f}" for b in s.peak_memory_bytes_by_rank),
            cell(s.oom_rate, ".0%"),
        )
    return table


def straggler_table(summary: DistTrainingSummary) -> Table:
    table = headed_table(
        "Ranks (measured): median compute seconds per step, the slowest rank, the spread",
        [
            "scenario",
            "compute s p50 by rank",
            "slowest rank",
            "straggler spread",
            "job step s p50",
            "loss first",
            "loss last",
        ],
        1,
    )
    for name, s in summary.scenarios.items():
        table.add_row(
            name,
            " ".join(f"{v:.3f}" for v in s.compute_s_p50_by_rank),
            str(s.slowest_rank) if s.slowest_rank is not None else "n/a",
            cell(s.straggler_spread, ".1%"),
            cell(s.job_step_s_p50, ".3f"),
            cell(s.loss_first, ".4f"),
            cell(s.loss_last, ".4f"),
        )
    return table


def recovery_table(summary: DistTrainingSummary) -> Table | None:
    rows = [(name, r) for name, s in summary.scenarios.items() for r in s.recoveries]
    if not rows:
        return None
    table = headed_table(
        "Failures and recoveries (measured): detect, resume, replay, loss continuity",
        [
            "scenario",
            "cause",
            "rank",
            "at step",
            "restored from",
            "steps replayed",
            "detect ms",
            "resume s",
            "replayed losses bit-equal",
        ],
        2,
    )
    for name, r in rows:
        table.add_row(
            name,
            r.cause,
            str(r.rank),
            str(r.step),
            str(r.restored_step) if r.restored_step is not None else "n/a",
            str(r.steps_replayed),
            f"{r.detect_s * 1e3:.0f}",
            cell(r.resume_s, ".2f"),
            f"{r.replayed_losses_equal}/{r.replayed_records}",
        )
    return table


def link_table(summary: DistTrainingSummary) -> Table:
    link = summary.link
    table = headed_table(
        "Links (measured on this host), for the cluster simulator's comm model",
        ["link", "MB/s", "bytes measured"],
        1,
    )
    table.add_row(
        "all-to-all (token payload)",
        cell(link.all_to_all_bytes_per_s, ",.0f", 1e-6),
        f"{link.all_to_all_bytes:,}",
    )
    table.add_row(
        "pipeline send/recv (ping-pong, best)",
        cell(link.pipeline_bytes_per_s, ",.0f", 1e-6),
        f"{link.pipeline_message_bytes:,}" if link.pipeline_message_bytes else "n/a",
    )
    table.add_row(
        "all-reduce (gradients)",
        cell(link.all_reduce_bytes_per_s, ",.0f", 1e-6),
        f"{link.all_reduce_bytes:,}",
    )
    return table


def dist_training_tables(summary: DistTrainingSummary) -> list[Table]:
    recovery = recovery_table(summary)
    tables = [layout_table(summary), straggler_table(summary), link_table(summary)]
    return tables + ([recovery] if recovery is not None else [])


def dist_training_lines(summary: DistTrainingSummary, reader: RunReader) -> Presentation:
    """What ``moeperf runs show`` prints of a training-dist run: its tables (the answer),
    the accelerators per scenario (detail)."""
    shown = Presentation(answer=dist_training_tables(summary))
    if summary.telemetry is not None:
        from moeperf.reports.terminal.telemetry_tables import telemetry_lines

        figures = {name: entry.accelerator for name, entry in summary.scenarios.items()}
        shown += telemetry_lines(
            summary.telemetry, figures, training=True, missing="no completed job step"
        )
    return shown
