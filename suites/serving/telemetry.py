"""The accelerator sampler in a serving run ([telemetry]): each level's figures.

The sampler itself (sources, labels, stop) is ``suites.telemetry.Telemetry``; the runner
starts it before the first level and labels the samples with each level's scenario.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pandas as pd

from moeperf.collectors.accel_figures import accelerator_figures
from moeperf.collectors.accel_records import AcceleratorFigures, DeviceSample, Unavailable
from moeperf.collectors.interference_records import InterferenceSummary
from moeperf.collectors.serving_records import ScenarioSummary
from moeperf.collectors.store import RunWriter
from moeperf.collectors.telemetry_records import TelemetrySummary
from moeperf.suites.serving.embedded.process import EmbeddedTarget
from moeperf.suites.telemetry import Telemetry
from moeperf.suites.telemetry_spec import TelemetrySpec


def serving_telemetry(
    spec: TelemetrySpec,
    process: EmbeddedTarget | None,
    run: RunWriter,
    on_sample: Callable[[DeviceSample], None] = lambda _sample: None,
) -> Telemetry:
    """The run's sampler; the process source watches an embedded target's process tree
    (asked for its pid at every read: a drill's restart changes it)."""
    pid = None if process is None else (lambda: process.pid)
    return Telemetry(spec, pid, run, on_sample)


def with_figures(
    telemetry: Telemetry, scenarios: dict[str, ScenarioSummary], frame: pd.DataFrame
) -> tuple[dict[str, ScenarioSummary], TelemetrySummary]:
    """Every scenario with its accelerator figures, and the run's telemetry summary.

    A scenario's window is the one its throughput is over (``collectors.summary``'s
    ``summarize_scenario``): the first actual send to the last completion among its
    measured requests (phase "measure", any status). Tokens and requests are its
    measured ok requests' output tokens and count, as in its output throughput. The
    run's: from the first measured send of any level to the last completion, with every
    level's tokens and requests.
    """
    samples = telemetry.samples()
    measured = frame[frame["phase"] == "measure"] if len(frame) else frame
    figured = dict(scenarios)
    for name, entry in scenarios.items():
        level = measured[measured["scenario"] == name] if len(measured) else measured
        figures = _over(samples, level, int(entry.output_tokens), entry.ok)
        if figures is not None:
            figured[name] = dataclasses.replace(entry, accelerator=figures)
    tokens = sum(int(e.output_tokens) for e in scenarios.values())
    whole = _over(samples, measured, tokens, sum(e.ok for e in scenarios.values()))
    return figured, telemetry.summary(len(samples), whole)


def with_interference_figures(
    telemetry: Telemetry,
    interference: InterferenceSummary,
    scenarios: dict[str, ScenarioSummary],
    frame: pd.DataFrame,
) -> tuple[InterferenceSummary, TelemetrySummary]:
    """Each arm with its levels' figures, and the run's telemetry summary.

    The quiet level's window and tokens are its scenario's, as in ``with_figures``; the
    mixed level's are its two scenarios' together (decoders and long prompts run at the
    same time: energy per token is over both's output tokens). No scenario gets figures
    of its own.
    """
    samples = telemetry.samples()
    measured = frame[frame["phase"] == "measure"] if len(frame) else frame

    def level(names: tuple[str, ...]) -> AcceleratorFigures | None:
        mine = measured[measured["scenario"].isin(names)] if len(measured) else measured
        entries = [scenarios[n] for n in names if n in scenarios]
        tokens = sum(int(e.output_tokens) for e in entries)
        return _over(samples, mine, tokens, sum(e.ok for e in entries))

    arms = tuple(
        dataclasses.replace(
            arm,
            quiet_accelerator=level((arm.quiet_scenario,)),
            mixed_accelerator=level((arm.decode_scenario, arm.prefill_scenario)),
        )
        for arm in interference.arms
    )
    whole = level(tuple(scenarios))
    return dataclasses.replace(interference, arms=arms), telemetry.summary(len(samples), whole)


def _over(
    samples: list[DeviceSample], measured: pd.DataFrame, tokens: int, requests: int
) -> AcceleratorFigures | None:
    """The figures from the first actual send of ``measured`` to its last completion."""
    if not samples or not len(measured):
        return None
    start, end = measured["send_ns"].min(), measured["done_ns"].max()
    if pd.isna(start) or pd.isna(end) or end <= start:
        return None
    figures = accelerator_figures(samples, int(start), int(end), tokens=tokens, requests=requests)
    return None if isinstance(figures, Unavailable) else figures
