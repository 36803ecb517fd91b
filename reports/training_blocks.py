"""The report blocks of training runs: one process (policies under skew, MFU, the
simulator check) and distributed (layouts, stragglers, recovery)."""

from __future__ import annotations

import pandas as pd

from moeperf.collectors.dist_training_summary import DEFINITIONS as DIST_DEFINITIONS
from moeperf.collectors.dist_training_summary import DistTrainingSummary
from moeperf.collectors.training_summary import SimulatorCheck, TrainingSummary
from moeperf.reports.accel_blocks import accelerator_blocks
from moeperf.reports.figures.dist_training import (
    layout_frame,
    link_frame,
    rank_frame,
    recovery_frame,
    time_split_chart,
)
from moeperf.reports.figures.expert_load import expert_load_heatmap, policy_matrices
from moeperf.reports.figures.memory import peak_memory
from moeperf.reports.figures.simulator_check import simulator_chart, simulator_frame
from moeperf.reports.figures.steps import event_table, policies, step_table
from moeperf.reports.figures.training_events import training_timeline
from moeperf.reports.figures.training_throughput import policy_throughput, policy_throughput_frame
from moeperf.reports.render import (
    Chart,
    Table,
)
from moeperf.reports.runs import RunData

GIB = 2**30


# --- training --------------------------------------------------------------------------


_POLICY_COLUMNS = {
    "step_time_s": "step time s",
    "lost_s": "lost to restarts s",
    "tokens_per_s": "tokens/s",
    "effective_tokens_per_s": "effective tokens/s",
    "mfu_mean": "MFU mean",
    "ooms": "OOMs",
}


def training_blocks(run: RunData) -> list[Chart | Table]:
    steps = run.steps
    if steps.empty:
        return [Table(pd.DataFrame({"steps": [0]}), "The run has no step records.")]
    table = step_table(steps)
    per_policy = policy_throughput_frame(table)
    shown = per_policy.rename(columns=_POLICY_COLUMNS)
    blocks: list[Chart | Table] = [
        Table(
            shown, "Per policy: effective tokens/s counts the time lost to restarts.", answers=True
        ),
        Chart(policy_throughput(per_policy, table), drawn_by=("steps", "training_throughput")),
        Chart(training_timeline(table, event_table(steps)), drawn_by=("steps", "training_events")),
        Chart(peak_memory(steps), drawn_by=("memory",)),
    ]
    for policy, matrix in policy_matrices(steps, policies(steps)).items():
        if matrix.size:
            heatmap = expert_load_heatmap(matrix, f"Expert load, {policy}")
            blocks.append(Chart(heatmap, drawn_by=("expert_load",)))
    summary = run.summary if isinstance(run.summary, TrainingSummary) else None
    if summary is not None and summary.simulator is not None:
        blocks += _simulator_blocks(summary.simulator)
    if summary is not None and summary.telemetry is not None:
        figures = {name: entry.accelerator for name, entry in summary.scenarios.items()}
        blocks += accelerator_blocks(summary.telemetry, figures, run.accelerator, training=True)
    return blocks


def _simulator_blocks(check: SimulatorCheck) -> list[Chart | Table]:
    efficiency = "; ".join(
        f"{size or 'model'}: {e:.1%} of peak, fitted on {check.fitted_on[size]}"
        for size, e in check.efficiency.items()
    )
    caption = (
        "The cluster simulator configured as this trainer (targets/cluster_sim/reference.py): "
        "predicted figures are simulated, before the measured ones are read. Error = "
        f"predicted / measured - 1; held to step time within {check.step_tolerance:.0%} and "
        f"peak memory within {check.peak_tolerance:.0%}. Its one fitted factor, compute "
        f"efficiency: {efficiency}; 'fitted' marks a scenario whose own steps set it."
    )
    if any(p.measured_step_s_paired is not None for p in check.scenarios.values()):
        caption += (
            " The scenarios ran interleaved (one step each in turn): 'step s measured' is "
            "a scenario's step at the fitted scenario's pace, its median x the median ratio "
            "of the two scenarios' steps in the same rounds, so the host's drift cancels."
        )
    if check.not_predicted:
        caption += " Not predicted: " + "; ".join(
            f"{name} ({why})" for name, why in check.not_predicted.items()
        )
    return [
        Table(simulator_frame(check), caption),
        Chart(simulator_chart(check), drawn_by=("simulator_check",)),
    ]


# --- distributed training --------------------------------------------------------------

DIST_MEASURED = (
    "Every figure is measured on this host, none simulated: each rank is a process on it, "
    "the ranks talk over gloo on loopback. "
)


# The names the tables give the summary's definitions (DistTrainingSummary.definitions).
_DIST_TERMS = {
    "job_step_s": "job step s",
    "tokens_per_s": "tokens/s",
    "effective_tokens_per_s": "effective tokens/s",
    "mfu": "MFU",
    "shares": "time shares",
    "bubble": "bubble",
    "straggler_spread": "straggler spread",
    "oom_rate": "OOM rate",
    "detect_s": "detect",
    "resume_s": "resume",
}


def _dist_defined(summary: DistTrainingSummary, *keys: str) -> str:
    """The summary's own definitions of ``keys`` (the code's, for an older summary)."""
    own = summary.definitions or {}
    return " ".join(f"{_DIST_TERMS[key]}: {own.get(key) or DIST_DEFINITIONS[key]}." for key in keys)


def dist_training_blocks(run: RunData) -> list[Chart | Table]:
    summary = run.summary if isinstance(run.summary, DistTrainingSummary) else None
    blocks: list[Chart | Table] = []
    if summary is None or not summary.scenarios:
        blocks.append(
            Table(
                pd.DataFrame({"scenarios": [0]}),
                "The run has no summary of its scenarios (it ended before writing one).",
            )
        )
    else:
        peak = summary.peak_flops
        blocks += [
            Table(
                layout_frame(summary),
                DIST_MEASURED + "Per layout, policy and skew; shares, bubble and OOM rate in "
                "%, comm = all-to-all + send/recv + all-reduce + wait; peak memory per rank "
                "in MiB, rank order; p stages, m micro-batches per pipeline; peak FLOP/s per "
                f"rank {peak.flops_per_s / 1e9:,.1f} G ({peak.source}). "
                + _dist_defined(
                    summary,
                    "tokens_per_s",
                    "effective_tokens_per_s",
                    "mfu",
                    "shares",
                    "bubble",
                    "oom_rate",
                ),
                answers=True,
            ),
            Table(
                rank_frame(summary),
                DIST_MEASURED + "Per scenario, its ranks: median compute seconds per step "
                "of each rank (rank order), the slowest (the others wait for it), the loss "
                "of the first and last completed step. "
                + _dist_defined(summary, "job_step_s", "straggler_spread"),
            ),
        ]
    if not run.steps.empty:
        blocks.append(
            Chart(
                time_split_chart(run.steps),
                DIST_MEASURED + "Each bar: one rank of one scenario, the mean over its step "
                "records (replays included) of each kind's seconds; compute is the step less "
                "the rest, so the bar's height is the rank's mean step time.",
                drawn_by=("dist_training",),
            )
        )
    if summary is None:
        return blocks
    blocks.append(
        Table(
            link_frame(summary),
            DIST_MEASURED + "This host's links, as the run measured them, not a cluster's: a "
            "simulation job's links_from = this run's directory gives them to the cluster "
            "simulator's communication model (targets/cluster_sim).",
        )
    )
    recoveries = recovery_frame(summary)
    if recoveries is not None:
        blocks.append(
            Table(
                recoveries,
                DIST_MEASURED + "Each failure (a killed rank, the fault drill, or an OOM) and "
                "the job's recovery from its newest checkpoint. "
                + _dist_defined(summary, "detect_s", "resume_s")
                + " Replayed losses bit-equal: k of the n rank-step records run again "
                "after the failure whose loss equals the first run's bit for bit.",
            )
        )
    if summary.telemetry is not None:
        # A job step is every rank's last execution of it (collectors.dist_training_summary).
        figures = {name: entry.accelerator for name, entry in summary.scenarios.items()}
        blocks += accelerator_blocks(summary.telemetry, figures, run.accelerator, training=True)
    return blocks
