"""A deployment sweep's answers, from its scenarios and request records.

Definitions (docs/suites/deploy-sweep.md quotes them):

- **Output tok/s per accelerator** of an arm at a level: the level's output tokens / measured
  window (``output_throughput_tok_s``), the mean over the arm's repeats, divided by the
  accelerators the arm uses.
- **Tok/s per user**: 1 / TPOT p50, TPOT over the measured ok requests of every repeat of the
  level together: the rate one user sees tokens arrive at while the answer decodes.
- **Capacity under the SLO**: an interval of streams. A level holds when every repeat of it
  held every criterion; the capacity is at least the highest level of the unbroken run of
  held levels from the lowest, and below the first level that did not hold.
- **Pareto front**: the (arm, level) points that no other point beats on both tok/s per user
  and output tok/s per accelerator (``collectors.pareto``).
- **Recommended arm**: of the arms that hold the SLO at some level, the one with the most
  output tok/s per accelerator at its capacity's lower end.
- **Compared with the recommended arm**, at the recommended level: the ratio of the mean
  per-request output rate (output tokens / (done - send), ``request_output_rates``) per
  accelerator, with a 95% percentile-bootstrap interval over the requests of every repeat
  (``collectors.bootstrap``). Worse: the interval is below 1; better: above 1; else not
  different. (In a closed loop of c streams the output rate is about c x that mean, so the
  test is of throughput per accelerator, made on per-request samples.)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from moeperf.collectors.bootstrap import bootstrap_ratio_ci
from moeperf.collectors.capacity_records import CapacityProbe, CapacityStatus, CapacitySummary
from moeperf.collectors.deploy_sweep_records import (
    DeployArm,
    DeployComparison,
    DeployLevel,
    DeployRecommendation,
    DeploySweepSummary,
    Outcome,
    ParetoPoint,
)
from moeperf.collectors.latency import per_request, request_output_rates
from moeperf.collectors.pareto import pareto_front
from moeperf.collectors.serving_records import ScenarioSummary

CONFIDENCE = 0.95

# A level's SLO judgement: held (None: not judged) and the reasons, in words.
Judge = Callable[[ScenarioSummary], tuple[bool | None, str]]


@dataclass(frozen=True, slots=True)
class LevelRun:
    """One level of one arm in one repeat: the scenario it stored."""

    arm: int
    streams: int
    scenario: str


def with_figures(
    sweep: DeploySweepSummary,
    runs: Sequence[LevelRun],
    frame: pd.DataFrame,
    scenarios: Mapping[str, ScenarioSummary],
    judge: Judge,
) -> DeploySweepSummary:
    """``sweep`` (its arms as run, without levels) with every figure of the module docstring."""
    measured = _measured_ok(frame)
    arms = tuple(_arm(arm, runs, measured, scenarios, judge) for arm in sweep.arms)
    recommendation = recommend(arms)
    return dataclasses.replace(
        sweep,
        arms=arms,
        pareto=pareto(arms),
        comparisons=compare(arms, recommendation, measured),
        recommendation=recommendation,
    )


def _measured_ok(frame: pd.DataFrame) -> pd.DataFrame:
    if not len(frame):
        return frame
    return frame[(frame["phase"] == "measure") & (frame["status"] == "ok")]


def _arm(
    arm: DeployArm,
    runs: Sequence[LevelRun],
    measured: pd.DataFrame,
    scenarios: Mapping[str, ScenarioSummary],
    judge: Judge,
) -> DeployArm:
    by_level: dict[int, list[str]] = {}
    for run in runs:
        if run.arm == arm.index and run.scenario in scenarios:
            by_level.setdefault(run.streams, []).append(run.scenario)
    levels = tuple(
        _level(streams, names, arm.accelerators, measured, scenarios, judge)
        for streams, names in sorted(by_level.items())
    )
    held, failed = capacity(levels)
    return dataclasses.replace(arm, levels=levels, capacity_held=held, capacity_failed=failed)


def _quantile(values: np.ndarray, q: float) -> float | None:
    values = values[np.isfinite(values)]
    return float(np.quantile(values, q)) if len(values) else None


def _level(
    streams: int,
    names: list[str],
    accelerators: int,
    measured: pd.DataFrame,
    scenarios: Mapping[str, ScenarioSummary],
    judge: Judge,
) -> DeployLevel:
    rates = [scenarios[n].output_throughput_tok_s for n in names]
    known = [r for r in rates if r is not None]
    output_tok_s = float(np.mean(known)) if known else None
    mine = measured[measured["scenario"].isin(names)] if len(measured) else measured
    derived = per_request(mine) if len(mine) else None
    tpot = _quantile(derived["tpot_s"].to_numpy(dtype=float), 0.5) if derived is not None else None
    ttft = _quantile(derived["ttft_s"].to_numpy(dtype=float), 0.99) if derived is not None else None
    verdicts = [judge(scenarios[n]) for n in names]
    held: bool | None = None
    if verdicts and all(v is not None for v, _ in verdicts):
        held = all(v for v, _ in verdicts)
    if len(names) == 1:
        reason = verdicts[0][1]
    else:
        reason = "; ".join(f"#{i}: {why}" for i, (_, why) in enumerate(verdicts, start=1))
    return DeployLevel(
        streams=streams,
        scenarios=tuple(names),
        output_tok_s=output_tok_s,
        output_tok_s_per_accelerator=None if output_tok_s is None else output_tok_s / accelerators,
        tpot_p50_s=tpot,
        tok_s_per_user=1.0 / tpot if tpot else None,
        ttft_p99_s=ttft,
        slo_held=held,
        slo_reason=reason,
    )


def capacity(levels: Sequence[DeployLevel]) -> tuple[int | None, int | None]:
    """(highest level held from the lowest up, first level not held); a level not judged
    ends the run of held levels without a failed one."""
    held: int | None = None
    for level in sorted(levels, key=lambda lv: lv.streams):
        if level.slo_held is True:
            held = level.streams
        elif level.slo_held is False:
            return held, level.streams
        else:
            break
    return held, None


def _level_of(arm: DeployArm, streams: int | None) -> DeployLevel | None:
    return next((lv for lv in arm.levels if lv.streams == streams), None)


def recommend(arms: Sequence[DeployArm]) -> DeployRecommendation:
    """The arm with the most output tok/s per accelerator at its capacity's lower end."""
    scored = []
    for arm in arms:
        level = _level_of(arm, arm.capacity_held)
        if level is not None and level.output_tok_s_per_accelerator is not None:
            scored.append((level.output_tok_s_per_accelerator, arm, level))
    if not scored:
        judged = sum(1 for arm in arms if arm.levels)
        return DeployRecommendation(
            None, None, f"no arm held the SLO at its lowest level ({judged} of {len(arms)} ran)"
        )
    scored.sort(key=lambda item: -item[0])
    best_rate, best, level = scored[0]
    upper = (
        f"fails at {best.capacity_failed}"
        if best.capacity_failed is not None
        else "the highest level run"
    )
    why = (
        f"{best.label} holds the SLO up to {level.streams} streams ({upper}) and serves "
        f"{best_rate:.4g} output tok/s per accelerator there, the most of the "
        f"{len(scored)} arm(s) that hold it at some level"
    )
    if len(scored) > 1:
        runner_up_rate, runner_up, runner_level = scored[1]
        why += (
            f"; next: {runner_up.label}, {runner_up_rate:.4g} at {runner_level.streams} "
            f"streams ({runner_up_rate / best_rate:.2f}x)"
        )
    return DeployRecommendation(best.index, level.streams, why)


def pareto(arms: Sequence[DeployArm]) -> tuple[ParetoPoint, ...]:
    points = [
        (arm.index, level.streams, level.tok_s_per_user, level.output_tok_s_per_accelerator)
        for arm in arms
        for level in arm.levels
        if level.tok_s_per_user is not None and level.output_tok_s_per_accelerator is not None
    ]
    front = pareto_front([(user, accel) for _, _, user, accel in points])
    return tuple(
        ParetoPoint(arm, streams, user, accel, on)
        for (arm, streams, user, accel), on in zip(points, front, strict=True)
    )


def _rates(arm: DeployArm, streams: int, measured: pd.DataFrame) -> np.ndarray:
    level = _level_of(arm, streams)
    if level is None or not len(measured):
        return np.empty(0)
    rates = request_output_rates(measured[measured["scenario"].isin(level.scenarios)])
    return rates[np.isfinite(rates)] / arm.accelerators


def compare(
    arms: Sequence[DeployArm], recommendation: DeployRecommendation, measured: pd.DataFrame
) -> tuple[DeployComparison, ...]:
    """Every other arm against the recommended one, at the recommended level."""
    if recommendation.arm is None or recommendation.streams is None:
        return ()
    streams = recommendation.streams
    best = arms[recommendation.arm]
    base = _rates(best, streams, measured)
    out = []
    for arm in arms:
        if arm.index == best.index:
            continue
        rates = _rates(arm, streams, measured)
        if not len(rates) or not len(base):
            why = f"no measured ok request at {streams} streams"
            out.append(DeployComparison(arm.index, streams, None, None, None, "not compared", why))
            continue
        ratio = float(rates.mean() / base.mean())
        interval = bootstrap_ratio_ci(base, rates, "mean", level=CONFIDENCE)
        if interval is None:
            out.append(DeployComparison(arm.index, streams, ratio, None, None, "not compared",
                                        "no bootstrap interval (a mean rate of 0)"))  # fmt: skip
            continue
        low, high = interval
        outcome: Outcome = "worse" if high < 1 else "better" if low > 1 else "not different"
        why = (
            f"mean per-request output rate per accelerator {ratio:.3f}x the recommended "
            f"arm's [95% {low:.3f}, {high:.3f}] at {streams} streams "
            f"({len(rates)} and {len(base)} requests)"
        )
        out.append(DeployComparison(arm.index, streams, ratio, low, high, outcome, why))
    return tuple(out)


def arm_capacity(arm: DeployArm, slo: str) -> CapacitySummary | None:
    """The arm's capacity under the sweep's SLO as a capacity search's result, for the gate
    (``reports.gate.capacity_verdict``: a candidate arm that fails at a level the baseline's
    held is a regression). Each level is a probe; the search resolved when a level held and
    one failed, ran above its levels when every one held, below when the lowest failed.
    None: the arm ran no level (it did not start, or was planned, not run)."""
    if not arm.levels:
        return None
    held, failed = arm.capacity_held, arm.capacity_failed
    status: CapacityStatus = (
        "resolved" if held is not None and failed is not None
        else "above_max" if held is not None
        else "below_min"
    )  # fmt: skip
    probes = tuple(
        CapacityProbe(level.streams, "; ".join(level.scenarios), level.slo_held,
                      level.slo_reason, "bracket")
        for level in arm.levels
    )  # fmt: skip
    return CapacitySummary("concurrency", slo, status, held, failed, probes)
