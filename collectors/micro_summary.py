"""Micro-benchmark summaries: per benchmark (or metric), its samples described.

A micro run's samples are named measurements (``SampleRecord``): for an ingested
pytest-benchmark file, one per round, the round's time per call in seconds. A benchmark's
summary is the ``collectors.quantiles`` description of its samples (count, mean,
p50 / p90 / p99 with 95% intervals), with its min and max.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pandas as pd

from moeperf.collectors.quantiles import CI_METHOD, ESTIMATOR, Described, describe

MICRO_QUANTILES = (0.5, 0.9, 0.99)


@dataclass(frozen=True, slots=True)
class BenchmarkSummary:
    """One benchmark of a micro run: its rounds described, in ``unit`` (seconds)."""

    scenario: str  # the benchmark's group ("" for none)
    unit: str
    direction: str  # which way is better: "lower" or "higher"
    iterations: int  # calls per round
    min: float
    max: float
    rounds: Described

    @property
    def median(self) -> float | None:
        return self.rounds.value_at(0.5)

    @property
    def p90(self) -> float | None:
        return self.rounds.value_at(0.9)


@dataclass(frozen=True, slots=True)
class MicroSummary:
    """The summary of a micro run: what one sample is, and every benchmark by full name."""

    SUITE: ClassVar[str] = "micro"

    sample: str
    benchmarks: dict[str, BenchmarkSummary]
    percentile_estimator: str = ESTIMATOR
    confidence_interval: str = CI_METHOD


def summarize_rounds(
    rounds: list[float], scenario: str, iterations: int, unit: str = "s"
) -> BenchmarkSummary:
    """A benchmark's summary from its round times (lower is better)."""
    return BenchmarkSummary(
        scenario=scenario,
        unit=unit,
        direction="lower",
        iterations=iterations,
        min=min(rounds),
        max=max(rounds),
        rounds=describe(rounds, quantiles=MICRO_QUANTILES),
    )


@dataclass(frozen=True, slots=True)
class SampleGroup:
    """The samples of one metric and scenario of a samples table, described."""

    metric: str
    scenario: str
    units: tuple[str, ...]  # every unit the samples give, in order of appearance
    directions: tuple[str, ...]
    values: Described


def summarize_samples(samples: pd.DataFrame) -> list[SampleGroup]:
    """Per metric and scenario of a samples table (``metric``, ``value``, ``unit``,
    ``direction``, ``scenario``), in order of appearance."""
    groups = []
    scenarios = samples["scenario"].fillna("").astype(str)
    for (metric, scenario), part in samples.groupby([samples["metric"], scenarios], sort=False):
        groups.append(
            SampleGroup(
                metric=str(metric),
                scenario=str(scenario),
                units=tuple(dict.fromkeys(part["unit"].astype(str))),
                directions=tuple(dict.fromkeys(part["direction"].astype(str))),
                values=describe(part["value"]),
            )
        )
    return groups
