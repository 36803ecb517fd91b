"""The report blocks of micro, simulation and accuracy runs."""

from __future__ import annotations

import pandas as pd

from moeperf.collectors.accuracy_records import AccuracySummary
from moeperf.collectors.simulation_summary import SimulationSummary
from moeperf.reports.accuracy_blocks import accuracy_blocks
from moeperf.reports.figures.cluster_sim import (
    ablation_frame,
    memory_chart,
    not_taken_frame,
    oom_rate_chart,
    policy_chart,
    published_lines,
    reproduction_frame,
    scenario_frame,
)
from moeperf.reports.figures.micro import micro_distributions, micro_summary
from moeperf.reports.render import (
    Chart,
    Table,
)
from moeperf.reports.runs import RunData

# --- micro -----------------------------------------------------------------------------


def micro_blocks(run: RunData) -> list[Chart | Table]:
    samples = run.samples
    if samples is None or samples.empty:
        return [Table(pd.DataFrame({"samples": [0]}), "The run has no samples.")]
    return [
        Table(
            micro_summary(samples),
            "Per metric: samples, mean, median with its 95% CI.",
            answers=True,
        ),
        Chart(micro_distributions(samples), drawn_by=("micro",)),
    ]


def simulation_blocks(run: RunData) -> list[Chart | Table]:
    summary = run.summary if isinstance(run.summary, SimulationSummary) else None
    if summary is None or (not summary.scenarios and not summary.reproductions):
        return [Table(pd.DataFrame({"scenarios": [0]}), "The run has no simulated scenarios.")]
    simulated = "Every figure is simulated by targets/cluster_sim, none measured. "
    blocks: list[Chart | Table] = []
    # The answer: the ablation where the run has one, else the published runs beside
    # ours, else the scenarios.
    answer = "ablation" if summary.ablation else "reproductions" if summary.reproductions else ""
    if summary.scenarios:
        blocks += [
            Table(scenario_frame(summary), simulated + "Per job, policy and skew; "
                  + " ".join(summary.assumptions), answers=not answer),
            Chart(oom_rate_chart(summary), drawn_by=("cluster_sim",)),
            Chart(policy_chart(summary), drawn_by=("cluster_sim",)),
            Chart(memory_chart(summary), drawn_by=("cluster_sim",)),
        ]  # fmt: skip
    if summary.ablation:
        caption = (
            simulated + "Seed 000's ablation: each step's effective throughput over the "
            "baseline, same job and skew; the last column is the paper's figure, not ours."
        )
        blocks.append(Table(ablation_frame(summary), caption, answers=answer == "ablation"))
    if summary.reproductions:
        # The answer in three lines (calibration, validation, not taken); the table of
        # every published row follows it.
        verdict = pd.DataFrame({"against published MoE training runs": published_lines(summary)})
        blocks.append(Table(verdict, simulated + "Error = simulated / published - 1.",
                            answers=answer == "reproductions"))  # fmt: skip
        caption = simulated + "Published MoE training runs: their figure beside ours (error = "
        caption += "simulated / published - 1). " + " ".join(published_lines(summary))
        blocks.append(Table(reproduction_frame(summary), caption))
    if summary.not_taken:
        caption = "Published rows the simulator cannot take, once per configuration, and why."
        blocks.append(Table(not_taken_frame(summary), caption))
    return blocks


def accuracy_run_blocks(run: RunData) -> list[Chart | Table]:
    summary = run.summary if isinstance(run.summary, AccuracySummary) else None
    return list(accuracy_blocks(summary))
