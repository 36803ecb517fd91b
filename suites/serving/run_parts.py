"""What a serving run's modes add once its levels are over: each mode's part of the
summary, its notes, and its say in how the run ends.

A part is one small record (``RunPart``): the runner collects the parts its modes made
(the sweep and its fits, a capacity search, a drill, a soak, the request audit, a run of
arms) and hands them to ``write_summary`` and to ``judged``; neither names a mode. A new
mode adds a part here, not a parameter to either.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import pandas as pd

from moeperf.collectors.capacity_records import CapacitySummary
from moeperf.collectors.drill_records import DrillSummary
from moeperf.collectors.elastic_records import ElasticSummary
from moeperf.collectors.interference_records import InterferenceSummary
from moeperf.collectors.mtp_ab_records import MtpAbSummary
from moeperf.collectors.mtp_ab_summary import with_figures
from moeperf.collectors.request_audit import RequestAudit, audit_text
from moeperf.collectors.serving_records import ServingSummary
from moeperf.collectors.soak_records import SoakSummary
from moeperf.collectors.sweep_records import SweepPointSummary, SweepSummary, fit_answer
from moeperf.suites.serving.capacity.run import capacity_note, capacity_verdict
from moeperf.suites.serving.faults.verdict import drill_verdict
from moeperf.suites.serving.level_plan import LevelOutcome
from moeperf.suites.serving.soak.run import soak_verdict
from moeperf.suites.serving.telemetry import with_interference_figures
from moeperf.suites.serving.verdict import Verdict, as_verdict
from moeperf.suites.serving.workload.sweep import SweepRun
from moeperf.suites.telemetry import Telemetry


class RunPart(Protocol):
    def add_to(self, summary: ServingSummary, frame: pd.DataFrame) -> ServingSummary:
        """``summary`` with this part in it (``frame``: the run's request records)."""
        ...

    def notes(self) -> list[str]:
        """What the run's notes say of this part, once the levels are over."""
        ...

    def judge(self, verdict: Verdict) -> Verdict:
        """The run's verdict given the one before this part's say."""
        ...


class _Part:
    """A part that adds no note and leaves the verdict as it is."""

    def notes(self) -> list[str]:
        return []

    def judge(self, verdict: Verdict) -> Verdict:
        return verdict


@dataclass(frozen=True, slots=True)
class SweepPart(_Part):
    """A sweep over prompt lengths: its points, which levels ran at each, and each
    length's fit ([sweep.fit])."""

    sweep: SweepRun
    outcomes: Sequence[LevelOutcome]
    fits: dict[int, CapacitySummary]

    def add_to(self, summary: ServingSummary, frame: pd.DataFrame) -> ServingSummary:
        def scenarios(length: int) -> tuple[str, ...]:
            return tuple(
                o.scenario for o in self.outcomes if o.input_tokens == length and not o.fit_probe
            )

        sweep = self.sweep
        swept = SweepSummary(
            context_tokens=sweep.limit.tokens,
            context_source=sweep.limit.source,
            max_output_tokens=sweep.max_output_tokens,
            points=tuple(
                SweepPointSummary(
                    p.input_tokens,
                    scenarios(p.input_tokens),
                    p.not_available,
                    self.fits.get(p.input_tokens),
                )
                for p in sweep.points
            ),
            plan=sweep.plan,
            load_mode=sweep.load_mode,
        )
        return dataclasses.replace(summary, sweep=swept)

    def notes(self) -> list[str]:
        return [
            f"Fit at {length} prompt tokens ({fit.criteria}): {fit_answer(fit)}."
            for length, fit in self.fits.items()
        ]


@dataclass(frozen=True, slots=True)
class CapacityPart:
    """A capacity search: its probes are the run's levels, and its answer is the run's.
    Levels above the capacity may fail (an overloaded target times out): that is what the
    search measures, not a failure of the run, so the search's verdict replaces the
    levels'."""

    capacity: CapacitySummary

    def add_to(self, summary: ServingSummary, frame: pd.DataFrame) -> ServingSummary:
        return dataclasses.replace(summary, capacity=self.capacity)

    def notes(self) -> list[str]:
        return [capacity_note(self.capacity)]

    def judge(self, verdict: Verdict) -> Verdict:
        return as_verdict(*capacity_verdict(self.capacity))


@dataclass(frozen=True, slots=True)
class DrillPart(_Part):
    drill: DrillSummary

    def add_to(self, summary: ServingSummary, frame: pd.DataFrame) -> ServingSummary:
        return dataclasses.replace(summary, drill=self.drill)

    def judge(self, verdict: Verdict) -> Verdict:
        return as_verdict(*drill_verdict(self.drill, verdict.status, verdict.reason))


@dataclass(frozen=True, slots=True)
class ElasticPart(_Part):
    """An elastic run's events and their verdicts: an event that failed its limit fails
    the run, whatever its levels' verdict."""

    elastic: ElasticSummary

    def add_to(self, summary: ServingSummary, frame: pd.DataFrame) -> ServingSummary:
        return dataclasses.replace(summary, elastic=self.elastic)

    def judge(self, verdict: Verdict) -> Verdict:
        failed = self.elastic.failed_events
        if not failed or verdict.status in ("aborted", "invalid"):
            return verdict
        first = failed[0]
        reason = (
            f"elastic event {first.index} ({first.action} replica {first.replica}): {first.why}"
        )
        return as_verdict("failed", reason)


@dataclass(frozen=True, slots=True)
class SoakPart(_Part):
    soak: SoakSummary

    def add_to(self, summary: ServingSummary, frame: pd.DataFrame) -> ServingSummary:
        return dataclasses.replace(summary, soak=self.soak)

    def judge(self, verdict: Verdict) -> Verdict:
        return as_verdict(*soak_verdict(self.soak, verdict.status, verdict.reason))


@dataclass(frozen=True, slots=True)
class AuditPart(_Part):
    """Records merged from other processes (maybe hosts): every request sent accounted
    for, or the run's counts cannot be trusted."""

    audit: RequestAudit

    def add_to(self, summary: ServingSummary, frame: pd.DataFrame) -> ServingSummary:
        return dataclasses.replace(summary, request_audit=self.audit)

    def judge(self, verdict: Verdict) -> Verdict:
        return verdict if self.audit.exact else Verdict("invalid", audit_text(self.audit))


@dataclass(frozen=True, slots=True)
class InterferencePart(_Part):
    """Prefill interference's arms; with the accelerator sampler, its figures per arm and
    level (they replace the per-level ones)."""

    interference: InterferenceSummary
    telemetry: Telemetry | None

    def add_to(self, summary: ServingSummary, frame: pd.DataFrame) -> ServingSummary:
        if self.telemetry is None:
            return dataclasses.replace(summary, interference=self.interference)
        interference, figures = with_interference_figures(
            self.telemetry, self.interference, summary.scenarios, frame
        )
        return dataclasses.replace(summary, interference=interference, telemetry=figures)


@dataclass(frozen=True, slots=True)
class MtpAbPart(_Part):
    """MTP A/B's arms. Its blocks repeat each arm: its own summary compares them, so the
    run has no repeated levels of its own."""

    mtp_ab: MtpAbSummary

    def add_to(self, summary: ServingSummary, frame: pd.DataFrame) -> ServingSummary:
        mtp_ab = with_figures(self.mtp_ab, frame, summary.scenarios) if len(frame) else self.mtp_ab
        return dataclasses.replace(summary, mtp_ab=mtp_ab, repeats=())


def judged(base: Verdict, parts: Sequence[RunPart]) -> Verdict:
    """The run's verdict: its levels' (``base``), then each part's say, in order."""
    verdict = base
    for part in parts:
        verdict = part.judge(verdict)
    return verdict
