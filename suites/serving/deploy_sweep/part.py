"""A deployment sweep's part of its run's summary, and its say in how the run ends."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pandas as pd

from moeperf.collectors.deploy_sweep_records import DeploySweepSummary
from moeperf.collectors.deploy_sweep_summary import LevelRun, with_figures
from moeperf.collectors.serving_records import ScenarioSummary, ServingSummary
from moeperf.suites.serving.capacity.judge import judge_probe
from moeperf.suites.serving.mode_spec import DeploySweepSpec
from moeperf.suites.serving.verdict import Verdict


class DeploySweepPart:
    """The sweep's figures, computed once the levels' summaries exist (``add_to``); the
    run's verdict reads them (``judge``)."""

    def __init__(
        self, sweep: DeploySweepSummary, runs: Sequence[LevelRun], criteria: DeploySweepSpec
    ):
        self.sweep = sweep
        self.runs = tuple(runs)
        self.criteria = criteria
        self.result: DeploySweepSummary | None = None

    def _judge(self, entry: ScenarioSummary) -> tuple[bool | None, str]:
        verdict = judge_probe(entry, self.criteria)
        return verdict.passed, verdict.reason

    def add_to(self, summary: ServingSummary, frame: pd.DataFrame) -> ServingSummary:
        self.result = with_figures(self.sweep, self.runs, frame, summary.scenarios, self._judge)
        return dataclasses.replace(summary, deploy_sweep=self.result)

    def notes(self) -> list[str]:
        return []

    def judge(self, verdict: Verdict) -> Verdict:
        """Client-bound levels keep the run invalid. Otherwise a level the target failed is
        that arm's SLO failure (its table shows it), not the run's: the run completes with
        a recommendation, and fails without one (no arm held the SLO at any level)."""
        if verdict.status == "invalid" or self.result is None:
            return verdict
        recommendation = self.result.recommendation
        if recommendation is None or recommendation.arm is None:
            why = recommendation.why if recommendation is not None else "no arm ran"
            return Verdict("failed", f"no arm held the SLO ({self.result.slo}): {why}")
        return Verdict("complete")
