"""The regression gate: a candidate's metrics against a baseline's, one verdict per metric,
and one verdict for the run.

The rule, exactly as implemented (``reports.verdicts.RULE`` and ``COVERAGE_RULE`` repeat
it in every gate.json). Before any metric, the runs must be comparable
(reports/comparability.py: the same host fingerprint and the same resolved spec), else
exit 2 unless forced.

For each metric (name and statistic) of the baseline, with m its minimum effect
(``collectors.min_effects.DEFAULT_MIN_EFFECTS`` by class, unless the candidate's spec
``[gate] min_effects`` or the caller overrides it) and the ratio candidate / baseline of
the statistic with its bootstrap interval (95% by default):
- reported: the headline output tokens/s ("tokens/window", ``MetricSamples.kind``
  "reported"): both values and their ratio, never tested (one number per level; the gate
  judges the per-request output rate instead, see reports/samples.py).
- missing from candidate: the candidate lacks the metric, or has no sample of it where
  the baseline has some (e.g. every request of a level failed). A failure, unless the
  metric is optional by definition (kind "optional": training MFU, which needs the
  device's peak FLOP/s): then "optional, missing from candidate", informational.
- inconclusive: fewer samples on either side than ``reports.stats.min_samples`` (8, and
  for percentiles enough for their order-statistic interval: 368 for p99), a baseline
  value that is not positive (no ratio), or a load level marked invalid in either run
  (the client was the bottleneck: its numbers may be the client's): not judged.
- regression: the one-sided test in the direction of a regression is significant after
  the Benjamini-Hochberg correction over all tested metrics (q < alpha) AND the whole
  interval lies beyond the minimum effect on the bad side (lower is better: interval
  low > 1 + m; higher is better: interval high < 1 - m). A failure.
- improvement: the whole interval lies beyond the minimum effect on the good side (lower
  is better: high < 1 - m; higher is better: low > 1 + m). Informational.
- significant, below minimum effect: q < alpha (the candidate is worse) but the interval
  excludes a material regression (lower: high <= 1 + m; higher: low >= 1 - m): a real
  change smaller than the gate fails on. Informational, never a failure.
- no change: the interval excludes a material regression and q >= alpha.
- inconclusive otherwise: the interval reaches past the minimum effect on the bad side but
  the regression is not established; the reason says which condition was missing.
A metric only the candidate has is "only in candidate", informational.

A capacity run (spec ``[capacity]``, ``collectors.capacity_records.CapacitySummary`` in its
summary) adds one metric, "capacity streams" (or "capacity requests/s": the search's
unit), of no load level, judged by ``capacity_verdict``. Each probe of the search is
already a statistical verdict on its own level (the SLO criteria judged by point
estimates with their intervals), so the gate compares the levels that held and failed,
not samples: no test, no ratio, no minimum effect. With b the baseline's search and c
the candidate's:
- missing from candidate: b exists and the candidate has none. A failure. A search only
  the candidate has is "only in candidate", informational.
- inconclusive: the SLO criteria (``criteria``) or the load modes differ (the spec check
  refuses such runs unless forced); the reason names both.
- regression: c failed at a level b held (c.failed_level <= b.passed_level). A failure.
- improvement: c held a level b failed (c.passed_level >= b.failed_level). Informational.
- no change: neither, and both searches resolved (status "resolved"; their intervals then
  overlap).
- inconclusive otherwise: a search that did not resolve (probe_limit, above_max,
  below_min, stopped); the reason names its status.
The reason always gives both intervals (``CapacitySummary.answer()``). ``moeperf gate RUN
--baseline`` passes each run's search (``reports.gate_output.judge_runs``); the paired
gate and A/A calibration pool their blocks' samples and pass none.
A sweep's fit search (``[sweep.fit]``: how many concurrent requests of a prompt length fit
at once) is a search of the same kind: each prompt length's adds a metric "in=LENGTH fit
streams", judged by the same rule.
Each arm of a deployment sweep (``[deploy_sweep]``) adds one more, "ARM capacity"
(``collectors.deploy_sweep_summary.arm_capacity``: its levels as the probes, the sweep's
SLO as the criteria), judged by the same rule: a candidate arm that failed at a level the
baseline's arm held is a regression; an arm the baseline ran and the candidate did not
(it did not start, or the planner kept it from running) is missing, a failure.
The two searches choose their probe levels from what they measure, so they need not probe
the same ones (nor need two runs' fit searches of a sweep, ``[sweep.fit]``): a level only
the baseline probed has its metrics made optional
(``reports.gate_output.unprobed_optional``: "optional, missing from candidate",
informational), and the capacity verdict judges the search.

Judged metrics are those with a decided outcome: regression, significant below minimum
effect, improvement, no change. The run's verdict: FAIL (exit 1) when any metric regressed
or a required one is missing from the candidate; else INCONCLUSIVE (exit 1) when the gate
judged too little to vouch for the run (``reports.verdicts.COVERAGE_RULE``: no level of
the baseline without a judged metric, and at least ``MIN_JUDGED_SHARE``, half, of the
baseline's required metrics judged); else PASS (exit 0).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from moeperf.collectors.capacity_records import CapacitySummary
from moeperf.reports.comparability import FingerprintCheck, SpecCheck
from moeperf.reports.errors import ReportUsageError
from moeperf.reports.samples import MetricSamples
from moeperf.reports.stats import (
    benjamini_hochberg,
    bootstrap_ratio_ci,
    min_effect_for,
    min_samples,
    rank_test,
)
from moeperf.reports.verdicts import GateResult, Verdict

# The capacity verdict's name and metric class ("capacity streams": name and unit).
CAPACITY = "capacity"


def gate(
    candidate: Sequence[MetricSamples],
    baseline: Sequence[MetricSamples],
    *,
    alpha: float = 0.05,
    min_effects: Mapping[str, float] | None = None,
    ci_level: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
    fingerprint: FingerprintCheck | None = None,
    spec: SpecCheck | None = None,
    baseline_label: str = "baseline",
    candidate_label: str = "candidate",
    baseline_capacity: CapacitySummary | None = None,
    candidate_capacity: CapacitySummary | None = None,
    fits: Mapping[str, tuple[CapacitySummary | None, CapacitySummary | None]] | None = None,
    arms: Mapping[str, tuple[CapacitySummary | None, CapacitySummary | None]] | None = None,
    unjudged_levels: Mapping[str, str] | None = None,
) -> GateResult:
    """Verdicts for every metric of either side (the rule is in the module docstring), the
    capacity verdict where either side has a capacity search, one verdict per prompt
    length of a sweep's fit search (``fits``: name -> (baseline's, candidate's)), and one
    per arm of a deployment sweep (``arms``, likewise).
    ``unjudged_levels``: level -> why its metrics are not judged (a level marked invalid
    in either run); they are inconclusive, and count against the coverage rule."""
    base = _by_key(baseline, "baseline")
    cand = _by_key(candidate, "candidate")
    rng = np.random.default_rng(seed)
    tested: list[dict[str, Any]] = []
    verdicts: dict[str, Verdict | dict[str, Any]] = {}
    for key in [*base, *(k for k in cand if k not in base)]:
        a, b = base.get(key), cand.get(key)
        if a is None:
            assert b is not None  # the key came from one side or the other
            verdicts[key] = _unmatched(b, "only in candidate", "not in the baseline")
            continue
        if a.kind == "reported":
            verdicts[key] = _reported(a, b)
            continue
        if b is None or (b.n == 0 < a.n):
            why = "not in the candidate" if b is None else "no samples in the candidate"
            optional = a.kind == "optional"
            outcome = "optional, missing from candidate" if optional else "missing from candidate"
            verdicts[key] = _unmatched(a, outcome, why)
            continue
        why_not = (unjudged_levels or {}).get(a.level) if a.level else None
        if why_not is not None:
            # An invalid level's numbers may be the client's (a client-bound loop reads
            # several chunks at once: ITL gaps of 0): a change there is not the target's.
            verdicts[key] = _unmatched(a, "inconclusive", f"not judged: {why_not}")
            continue
        if a.direction != b.direction:
            raise ReportUsageError(
                f"{key}: lower-or-higher-is-better differs ({a.direction} in the baseline, "
                f"{b.direction} in the candidate)"
            )
        entry = _measure(a, b, min_effects, ci_level, n_boot, rng)
        verdicts[key] = entry
        if entry.get("p_value") is not None:
            tested.append(entry)
    for entry, q in zip(tested, benjamini_hochberg([e["p_value"] for e in tested]), strict=True):
        entry["q_value"] = float(q)
    final = [v if isinstance(v, Verdict) else _decide(v, alpha) for v in verdicts.values()]
    capacity = capacity_verdict(candidate_capacity, baseline_capacity)
    if capacity is not None:
        final.append(capacity)
    for name, (base_fit, cand_fit) in (fits or {}).items():
        verdict = capacity_verdict(cand_fit, base_fit, name, "fit search at this length")
        if verdict is not None:
            final.append(verdict)
    for name, (base_arm, cand_arm) in (arms or {}).items():
        verdict = capacity_verdict(cand_arm, base_arm, name, "measured capacity of this arm")
        if verdict is not None:
            final.append(verdict)
    result = GateResult(
        final,
        alpha,
        ci_level,
        n_boot,
        seed,
        fingerprint,
        baseline_label,
        candidate_label,
        spec=spec,
        min_effects=dict(min_effects or {}),
    )
    if fingerprint is not None and fingerprint.forced:
        result.notes.append("FORCED: the host fingerprints differ; the comparison may not be valid")
    if spec is not None and spec.forced:
        fields = ", ".join(d.field for d in spec.differences)
        result.notes.append(f"FORCED: the resolved specs differ ({fields}); see 'forced'")
    return result


def _by_key(metrics: Sequence[MetricSamples], side: str) -> dict[str, MetricSamples]:
    out: dict[str, MetricSamples] = {}
    for metric in metrics:
        if metric.key in out:
            raise ValueError(f"{side}: metric {metric.key!r} given twice")
        out[metric.key] = metric
    return out


def _unmatched(metric: MetricSamples, outcome: str, reason: str) -> Verdict:
    return Verdict(
        metric.name,
        metric.statistic,
        metric.direction,
        metric.metric_class,
        metric.unit,
        outcome,
        reason,
        level=metric.level,
        kind=metric.kind,
    )


def _reported(a: MetricSamples, b: MetricSamples | None) -> Verdict:
    """A headline value of both sides, untested (see ``reports.stats`` for why)."""
    base = a.point if a.n else None
    cand = b.point if b is not None and b.n else None
    ratio = None
    if base is not None and cand is not None and base > 0 and math.isfinite(cand):
        ratio = cand / base
    return Verdict(
        a.name,
        a.statistic,
        a.direction,
        a.metric_class,
        a.unit,
        "reported",
        "one value per level: shown, not tested" if b is not None else "not in the candidate",
        level=a.level,
        kind=a.kind,
        n_baseline=a.n,
        n_candidate=b.n if b is not None else 0,
        baseline=base,
        candidate=cand,
        ratio=ratio,
    )


def _measure(
    a: MetricSamples,
    b: MetricSamples,
    min_effects: Mapping[str, float] | None,
    ci_level: float,
    n_boot: int,
    rng: np.random.Generator,
) -> dict[str, Any]:
    """Everything about one metric but the q-value and the outcome."""
    entry: dict[str, Any] = dict(
        name=a.name,
        statistic=a.statistic,
        direction=a.direction,
        metric_class=a.metric_class,
        unit=a.unit,
        level=a.level,
        kind=a.kind,
        n_baseline=a.n,
        n_candidate=b.n,
        baseline=a.point if a.n else None,
        candidate=b.point if b.n else None,
        min_effect=min_effect_for(a.name, a.statistic, a.metric_class, min_effects),
    )
    needed = min_samples(a.statistic)
    if min(a.n, b.n) < needed:
        entry["reason"] = (
            f"too few samples for {a.statistic}: {a.n} baseline, {b.n} candidate, "
            f"{needed} needed per side"
        )
        return entry
    if not entry["baseline"] or not entry["baseline"] > 0:
        entry["reason"] = "baseline value is not positive: no ratio"
        return entry
    entry["ratio"] = entry["candidate"] / entry["baseline"]
    ci = bootstrap_ratio_ci(a.values, b.values, a.statistic, n_boot, ci_level, rng)
    if ci is None:
        entry["reason"] = "bootstrap ratio undefined (a baseline resample is not positive)"
        return entry
    entry["ci_low"], entry["ci_high"] = ci
    entry["p_value"], entry["test"] = rank_test(a.values, b.values, a.statistic, a.direction)
    return entry


def _decide(entry: dict[str, Any], alpha: float) -> Verdict:
    if entry.get("q_value") is None:
        return Verdict(outcome="inconclusive", **entry)
    m = entry["min_effect"]
    low, high, q = entry["ci_low"], entry["ci_high"], entry["q_value"]
    lower_better = entry["direction"] == "lower"
    bad_bound = 1 + m if lower_better else 1 - m
    good_bound = 1 - m if lower_better else 1 + m
    # The interval's end nearest to "no regression", and its end nearest to "regression".
    best, worst = (low, high) if lower_better else (high, low)
    beyond_bad = best > bad_bound if lower_better else best < bad_bound
    beyond_good = worst < good_bound if lower_better else worst > good_bound
    excludes_bad = worst <= bad_bound if lower_better else worst >= bad_bound
    ci = f"CI [{low:.3f}, {high:.3f}]"
    if q < alpha and beyond_bad:
        outcome = "regression"
        reason = f"q={q:.2g} < {alpha:g} and {ci} beyond the {m:.0%} minimum effect"
    elif beyond_good:
        outcome, reason = "improvement", f"{ci} beyond the {m:.0%} minimum effect (better)"
    elif excludes_bad and q < alpha:
        outcome = "significant, below minimum effect"
        reason = f"worse (q={q:.2g} < {alpha:g}) but {ci} within the {m:.0%} minimum effect"
    elif excludes_bad:
        outcome, reason = "no change", f"{ci} excludes a regression of {m:.0%} or more"
    elif q < alpha:
        outcome = "inconclusive"
        reason = f"significant (q={q:.2g}) but {ci} straddles the {m:.0%} minimum effect"
    else:
        outcome = "inconclusive"
        reason = f"{ci} reaches past the {m:.0%} minimum effect but q={q:.2g} >= {alpha:g}"
    return Verdict(outcome=outcome, reason=reason, **entry)


def capacity_verdict(
    candidate: CapacitySummary | None,
    baseline: CapacitySummary | None,
    name: str = CAPACITY,
    search: str = "capacity search",
) -> Verdict | None:
    """The capacity searches' verdict (the module docstring's rule); None if neither side
    has one. ``baseline`` and ``candidate`` hold the levels that held, ``baseline_failed``
    and ``candidate_failed`` those that failed."""
    either = baseline or candidate
    if either is None:
        return None

    def verdict(outcome: str, reason: str) -> Verdict:
        b, c = baseline, candidate
        sides = [f"{side}: {s.answer()}" for side, s in (("baseline", b), ("candidate", c)) if s]
        return Verdict(
            name,
            either.unit,
            "higher",
            CAPACITY,
            either.unit,
            outcome,
            "; ".join([reason, *sides]),
            baseline=b.passed_level if b else None,
            candidate=c.passed_level if c else None,
            baseline_failed=b.failed_level if b else None,
            candidate_failed=c.failed_level if c else None,
        )

    if baseline is None:
        return verdict("only in candidate", f"no {search} in the baseline")
    if candidate is None:
        return verdict("missing from candidate", f"no {search} in the candidate")
    if candidate.criteria != baseline.criteria:
        return verdict(
            "inconclusive",
            f"the SLO criteria differ: {baseline.criteria} vs {candidate.criteria}",
        )
    if candidate.mode != baseline.mode:
        return verdict(
            "inconclusive", f"the load modes differ: {baseline.mode} vs {candidate.mode}"
        )
    unit = baseline.unit
    held, failed = baseline.passed_level, candidate.failed_level
    if failed is not None and held is not None and failed <= held:
        return verdict(
            "regression",
            f"the candidate failed at {failed:g} {unit}, a level the baseline held "
            f"(up to {held:g})",
        )
    held, failed = candidate.passed_level, baseline.failed_level
    if held is not None and failed is not None and held >= failed:
        return verdict(
            "improvement",
            f"the candidate held {held:g} {unit}, a level the baseline failed (from {failed:g})",
        )
    unresolved = [
        f"the {side}'s search did not resolve (status {s.status})"
        for side, s in (("baseline", baseline), ("candidate", candidate))
        if s.status != "resolved"
    ]
    if unresolved:
        return verdict("inconclusive", " and ".join(unresolved))
    return verdict("no change", "both searches resolved and their intervals overlap")
