"""A soak run's verdicts in the gate: each trend the soak judges (collectors.soak_records:
a memory leak, throughput, TTFT or TPOT drift, KV usage rising, expert-load drift) is one
gate metric of class "soak", "soak <trend> slope per hour"; expert-load drift, a distance
and not a slope, is "soak expert-load drift total variation first to last window" (the
largest over the MoE layers).

A slope is one number per run, judged by its own 95% interval against the soak's
thresholds, not a sample to bootstrap against the baseline's; so the candidate's own
verdict decides, as the capacity search's does:
- regression: the candidate's soak found the trend (its whole interval past the
  threshold). A failure, whatever the baseline: a baseline that leaked could not have
  been promoted (its run failed).
- no change: the candidate's soak did not find it.
- inconclusive: the target does not report what the trend needs ("not available") or too
  few windows to fit an interval.
- missing from candidate: the baseline is a soak run and the candidate is not. A failure.
A trend whose finding does not fail the run (expert-load drift: routing follows the
prompts, so it says as much about the workload as about the target) is "reported" in the
gate, its kind too: shown with both figures and the candidate's finding, never a failure,
and not among the metrics the gate must judge.
Both figures are shown; the reason is the candidate's own, then the baseline's outcome.
"""

from __future__ import annotations

from moeperf.collectors.soak_records import Slope, SoakSummary, SoakVerdict
from moeperf.reports.verdicts import Verdict

SOAK = "soak"
STATISTIC = "slope per hour"
EXPERT_STATISTIC = "total variation first to last window"
_OUTCOMES = {"found": "regression", "not found": "no change"}


def _figure(summary: SoakSummary, name: str) -> tuple[float | None, str, str, str]:
    """The figure a trend is judged on, the better direction, its unit and its statistic."""
    slopes: dict[str, tuple[Slope, str, str]] = {
        "memory leak": (summary.rss, "lower", "B/h"),
        "throughput drift": (summary.throughput, "higher", "tok/s/h"),
        "TTFT drift": (summary.ttft_p50, "lower", "s/h"),
        "TPOT drift": (summary.tpot_p50, "lower", "s/h"),
        "KV usage rising": (summary.kv_usage, "lower", "/h"),
    }
    if name in slopes:
        slope, direction, unit = slopes[name]
        return slope.per_hour, direction, unit, STATISTIC
    # expert-load drift: a distance between two windows' shares, not a slope
    drift = summary.expert_drift_by_layer
    return (max(drift) if drift else None), "lower", "", EXPERT_STATISTIC


def _gated(found: SoakVerdict, outcome: str) -> tuple[str, str]:
    """The gate's outcome and metric kind: a finding that does not fail the run is
    reported (shown, never a failure, not one the gate must judge)."""
    return (outcome, "required") if found.fails_run else ("reported", "reported")


def soak_verdicts(candidate: SoakSummary | None, baseline: SoakSummary | None) -> list[Verdict]:
    """The gate's soak metrics (the module docstring's rule); none if neither run soaked."""
    if candidate is None:
        if baseline is None:
            return []
        missing = []
        for found in baseline.verdicts:
            base, direction, unit, statistic = _figure(baseline, found.name)
            reason = "the baseline is a soak run; the candidate has no soak"
            outcome, kind = _gated(found, "missing from candidate")
            missing.append(
                Verdict(f"{SOAK} {found.name}", statistic, direction, SOAK, unit, outcome,
                        reason, kind=kind, baseline=base)
            )  # fmt: skip
        return missing
    base_verdicts = {v.name: v for v in baseline.verdicts} if baseline else {}
    verdicts = []
    for found in candidate.verdicts:
        value, direction, unit, statistic = _figure(candidate, found.name)
        base = _figure(baseline, found.name)[0] if baseline is not None else None
        reason = found.reason
        outcome, kind = _gated(found, _OUTCOMES.get(found.outcome, "inconclusive"))
        if not found.fails_run:
            reason = f"{found.outcome}: {reason}"
        if found.name in base_verdicts:
            reason += f"; baseline: {base_verdicts[found.name].outcome}"
        verdicts.append(
            Verdict(
                f"{SOAK} {found.name}",
                statistic,
                direction,
                SOAK,
                unit,
                outcome,
                reason,
                kind=kind,
                baseline=base,
                candidate=value,
            )
        )
    return verdicts
