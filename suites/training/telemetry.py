"""The accelerator sampler in a training run ([telemetry]): each scenario's figures.

The sampler (``suites.telemetry.Telemetry``) watches the harness's own process tree (the
trainer runs in it, ranks are its children; the sampler's thread is counted too) and the
spec's GPUs. A scenario run to its end before the next (``matrix.order = "sequential"``)
labels the samples with its name, and its figures are over its steps' span: the first
step's start to the last one's end (restarts, replays and checkpoint writes between them
included, so energy per step is the effective one), with the tokens and the steps of its
completed (not replayed) steps, as the summary counts them. Interleaved scenarios share
every second of the run, one step each in turn: no scenario's energy can be told apart,
and none gets figures (a note says so). The run's figures are over every completed step
of every scenario, in either order.

A training-dist run's jobs run one after the other, each scenario's ranks children of the
harness: a scenario's figures are over its completed job steps (every rank reported the
step, its last execution), the first one's start to the last one's end, with their tokens.
Each layout's budget calibration, where there is one, runs unlabelled between scenarios.
"""

from __future__ import annotations

import dataclasses
import os

from moeperf.collectors.accel_figures import training_figures
from moeperf.collectors.accel_records import Unavailable
from moeperf.collectors.dist_training_summary import DistOutcome, DistTrainingSummary, job_steps
from moeperf.collectors.export.live_export import LiveExporter
from moeperf.collectors.store import RunWriter
from moeperf.collectors.training_summary import ScenarioOutcome, TrainingSummary, is_replay
from moeperf.suites.telemetry import Telemetry
from moeperf.suites.telemetry_spec import TelemetrySpec

INTERLEAVED = (
    "Telemetry: the scenarios ran interleaved, one step each in turn, so no scenario's "
    "energy or utilisation can be told apart; the samples are stored, without figures per "
    "scenario."
)


def training_telemetry(
    spec: TelemetrySpec, run: RunWriter, exporter: LiveExporter | None
) -> Telemetry:
    """The run's sampler, over this process's tree (the trainer) and the spec's GPUs."""
    on_sample = exporter.observe_device if exporter is not None else (lambda _sample: None)
    return Telemetry(spec, os.getpid, run, on_sample)


def with_figures(
    telemetry: Telemetry,
    summary: TrainingSummary,
    outcomes: list[ScenarioOutcome],
    interleaved: bool,
) -> TrainingSummary:
    """The summary with each scenario's figures (sequential runs) and the sampler's."""
    samples = telemetry.samples()
    scenarios = dict(summary.scenarios)
    for outcome in outcomes if not interleaved else ():
        completed = [r for r in outcome.records if not is_replay(r)]
        figures = training_figures(samples, completed)
        if outcome.name in scenarios and not isinstance(figures, Unavailable):
            scenarios[outcome.name] = dataclasses.replace(
                scenarios[outcome.name], accelerator=figures
            )
    # The whole run: every completed step of every scenario (interleaved ones too).
    every = [r for o in outcomes for r in o.records if not is_replay(r)]
    whole = training_figures(samples, every)
    run = None if isinstance(whole, Unavailable) else whole
    return dataclasses.replace(
        summary, scenarios=scenarios, telemetry=telemetry.summary(len(samples), run)
    )


def with_dist_figures(
    telemetry: Telemetry, summary: DistTrainingSummary, outcomes: list[DistOutcome]
) -> DistTrainingSummary:
    """The summary of a training-dist run with each scenario's figures and the sampler's."""
    samples = telemetry.samples()
    scenarios = dict(summary.scenarios)
    every = []
    for outcome in outcomes:
        steps = job_steps(outcome)
        every += steps
        figures = training_figures(samples, steps)
        if outcome.name in scenarios and not isinstance(figures, Unavailable):
            scenarios[outcome.name] = dataclasses.replace(
                scenarios[outcome.name], accelerator=figures
            )
    whole = training_figures(samples, every)
    run = None if isinstance(whole, Unavailable) else whole
    return dataclasses.replace(
        summary, scenarios=scenarios, telemetry=telemetry.summary(len(samples), run)
    )
