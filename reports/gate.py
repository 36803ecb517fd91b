"""The regression gate: a candidate's metrics against a baseline's, one verdict per metric.

The rule, exactly as implemented (``RULE`` repeats it in every gate.json):

For each metric (name and statistic) present on both sides, with m its minimum effect
(``reports.stats.DEFAULT_MIN_EFFECTS`` by class unless overridden) and the ratio
candidate / baseline of the statistic with its bootstrap interval (95% by default):
- inconclusive: fewer samples on either side than ``reports.stats.min_samples`` (8, and
  for percentiles enough for their order-statistic interval: 368 for p99), or a baseline
  value that is not positive (no ratio).
- regression: the one-sided test in the direction of a regression is significant after
  the Benjamini-Hochberg correction over all tested metrics (q < alpha) AND the whole
  interval lies beyond the minimum effect on the bad side (lower is better: interval
  low > 1 + m; higher is better: interval high < 1 - m). Only this fails the gate.
- improvement: the whole interval lies beyond the minimum effect on the good side (lower
  is better: high < 1 - m; higher is better: low > 1 + m). Informational, never a failure.
- no change: the interval excludes a material regression (lower: high <= 1 + m; higher:
  low >= 1 - m).
- inconclusive otherwise: the interval reaches past the minimum effect on the bad side but
  the regression is not established; the reason says which condition was missing.
Metrics on only one side are listed as "missing". Exit code 1 when any metric regressed,
else 0. Runs from hosts whose fingerprints (``collectors.fingerprint.fingerprint_key``)
differ are refused (exit 2) unless forced, and a forced verdict says so.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from collectors.fingerprint import fingerprint_key
from reports.errors import ReportUsageError
from reports.samples import MetricSamples
from reports.stats import (
    benjamini_hochberg,
    bootstrap_ratio_ci,
    min_effect_for,
    min_samples,
    point_value,
    rank_test,
)

RULE = (
    "regression = BH-adjusted one-sided p (Mann-Whitney for mean/median/p50, Brown-Mood "
    "quantile test for other percentiles) < alpha AND the bootstrap CI of candidate/baseline "
    "lies entirely beyond the minimum effect on the bad side; improvement = CI entirely beyond "
    "it on the good side; no change = CI excludes a material regression; inconclusive = too "
    "few samples or neither; exit 1 only on a regression"
)
OUTCOMES = ("regression", "improvement", "no change", "inconclusive", "missing")


@dataclass(frozen=True)
class Verdict:
    """The gate's finding on one metric."""

    name: str
    statistic: str
    direction: str
    metric_class: str
    unit: str
    outcome: str
    reason: str
    n_baseline: int = 0
    n_candidate: int = 0
    baseline: float | None = None
    candidate: float | None = None
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    p_value: float | None = None
    q_value: float | None = None
    min_effect: float | None = None
    test: str | None = None

    @property
    def key(self) -> str:
        return f"{self.name} {self.statistic}"


@dataclass(frozen=True)
class FingerprintCheck:
    matches: bool
    forced: bool
    baseline: tuple
    candidate: tuple


@dataclass(frozen=True)
class GateResult:
    verdicts: list[Verdict]
    alpha: float
    ci_level: float
    n_boot: int
    seed: int
    fingerprint: FingerprintCheck | None = None
    baseline_label: str = "baseline"
    candidate_label: str = "candidate"
    notes: list[str] = field(default_factory=list)

    def by_outcome(self, outcome: str) -> list[Verdict]:
        return [v for v in self.verdicts if v.outcome == outcome]

    @property
    def regressions(self) -> list[Verdict]:
        return self.by_outcome("regression")

    @property
    def exit_code(self) -> int:
        return 1 if self.regressions else 0

    def to_dict(self) -> dict[str, Any]:
        return jsonable(
            {
                "baseline": self.baseline_label,
                "candidate": self.candidate_label,
                "exit_code": self.exit_code,
                "rule": RULE,
                "alpha": self.alpha,
                "ci_level": self.ci_level,
                "bootstrap_resamples": self.n_boot,
                "seed": self.seed,
                "fingerprint": dataclasses.asdict(self.fingerprint) if self.fingerprint else None,
                "counts": {o: len(self.by_outcome(o)) for o in OUTCOMES},
                "notes": self.notes,
                "verdicts": [{"key": v.key, **dataclasses.asdict(v)} for v in self.verdicts],
            }
        )


def jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, float | np.floating):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    return value


def check_fingerprints(
    baseline_host: Mapping[str, Any], candidate_host: Mapping[str, Any], force: bool = False
) -> FingerprintCheck:
    """Refuse runs measured on different hosts (ReportUsageError, exit 2) unless forced."""
    a, b = fingerprint_key(dict(baseline_host)), fingerprint_key(dict(candidate_host))
    if a != b and not force:
        raise ReportUsageError(
            "the runs were measured on different hosts and are not comparable:\n"
            f"  baseline  (cpu, cores, gpus): {a}\n"
            f"  candidate (cpu, cores, gpus): {b}\n"
            "record a baseline on this host, or pass --force to gate anyway "
            "(the verdict then says it was forced)"
        )
    return FingerprintCheck(matches=a == b, forced=a != b, baseline=a, candidate=b)


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
    baseline_label: str = "baseline",
    candidate_label: str = "candidate",
) -> GateResult:
    """Verdicts for every metric of either side (the rule is in the module docstring)."""
    base = _by_key(baseline, "baseline")
    cand = _by_key(candidate, "candidate")
    rng = np.random.default_rng(seed)
    tested: list[dict[str, Any]] = []
    verdicts: dict[str, Verdict | dict[str, Any]] = {}
    for key in [*base, *(k for k in cand if k not in base)]:
        a, b = base.get(key), cand.get(key)
        if a is None:
            verdicts[key] = _missing(cand[key], "baseline")
            continue
        if b is None:
            verdicts[key] = _missing(a, "candidate")
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
    notes = []
    if fingerprint is not None and fingerprint.forced:
        notes.append("FORCED: the host fingerprints differ; the comparison may not be valid")
    return GateResult(
        final,
        alpha,
        ci_level,
        n_boot,
        seed,
        fingerprint,
        baseline_label,
        candidate_label,
        notes,
    )


def _by_key(metrics: Sequence[MetricSamples], side: str) -> dict[str, MetricSamples]:
    out: dict[str, MetricSamples] = {}
    for metric in metrics:
        if metric.key in out:
            raise ValueError(f"{side}: metric {metric.key!r} given twice")
        out[metric.key] = metric
    return out


def _missing(metric: MetricSamples, absent_from: str) -> Verdict:
    return Verdict(
        metric.name,
        metric.statistic,
        metric.direction,
        metric.metric_class,
        metric.unit,
        "missing",
        f"not in the {absent_from}",
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
        n_baseline=a.n,
        n_candidate=b.n,
        baseline=point_value(a.values, a.statistic) if a.n else None,
        candidate=point_value(b.values, b.statistic) if b.n else None,
        min_effect=min_effect_for(a.name, a.statistic, a.metric_class, min_effects),
    )
    needed = min_samples(a.statistic)
    if min(a.n, b.n) < needed:
        entry["reason"] = (
            f"too few samples for {a.statistic}: {a.n} baseline, {b.n} candidate, "
            f"{needed} needed per side"
        )
        return entry
    if not entry["baseline"] or entry["baseline"] <= 0:
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
    elif excludes_bad:
        outcome, reason = "no change", f"{ci} excludes a regression of {m:.0%} or more"
    elif q < alpha:
        outcome = "inconclusive"
        reason = f"significant (q={q:.2g}) but {ci} reaches within the {m:.0%} minimum effect"
    else:
        outcome = "inconclusive"
        reason = f"{ci} reaches past the {m:.0%} minimum effect but q={q:.2g} >= {alpha:g}"
    return Verdict(outcome=outcome, reason=reason, **entry)
