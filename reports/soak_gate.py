"""A soak run's verdicts in the gate: each trend the soak judges (collectors.soak_records:
a memory leak, throughput, TTFT or TPOT drift, KV usage rising, expert-load drift) is one
gate metric of class "soak", "soak <trend> slope per hour".

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
Both slopes are shown; the reason is the candidate's own, then the baseline's outcome.
"""

from __future__ import annotations

from collectors.soak_records import Slope, SoakSummary, SoakVerdict
from reports.verdicts import Verdict

SOAK = "soak"
STATISTIC = "slope per hour"
_OUTCOMES = {"found": "regression", "not found": "no change"}


def _slope(summary: SoakSummary, name: str) -> tuple[Slope | None, str, str]:
    """The slope a trend is judged on, the better direction, and its unit per hour."""
    if name == "memory leak":
        return summary.rss, "lower", "B/h"
    if name == "throughput drift":
        return summary.throughput, "higher", "tok/s/h"
    if name == "TTFT drift":
        return summary.ttft_p50, "lower", "s/h"
    if name == "TPOT drift":
        return summary.tpot_p50, "lower", "s/h"
    if name == "KV usage rising":
        return summary.kv_usage, "lower", "/h"
    return None, "lower", ""  # expert-load drift: a distance, not a slope


def soak_verdicts(candidate: SoakSummary | None, baseline: SoakSummary | None) -> list[Verdict]:
    """The gate's soak metrics (the module docstring's rule); none if neither run soaked."""
    if candidate is None:
        if baseline is None:
            return []
        missing = []
        for found in baseline.verdicts:
            _, direction, unit = _slope(baseline, found.name)
            reason = "the baseline is a soak run; the candidate has no soak"
            missing.append(
                Verdict(f"{SOAK} {found.name}", STATISTIC, direction, SOAK, unit,
                        "missing from candidate", reason)
            )  # fmt: skip
        return missing
    base: dict[str, SoakVerdict] = {v.name: v for v in baseline.verdicts} if baseline else {}
    verdicts = []
    for found in candidate.verdicts:
        slope, direction, unit = _slope(candidate, found.name)
        base_slope = _slope(baseline, found.name)[0] if baseline is not None else None
        reason = found.reason
        if found.name in base:
            reason += f"; baseline: {base[found.name].outcome}"
        verdicts.append(
            Verdict(
                f"{SOAK} {found.name}",
                STATISTIC,
                direction,
                SOAK,
                unit,
                _OUTCOMES.get(found.outcome, "inconclusive"),
                reason,
                baseline=base_slope.per_hour if base_slope is not None else None,
                candidate=slope.per_hour if slope is not None else None,
            )
        )
    return verdicts
