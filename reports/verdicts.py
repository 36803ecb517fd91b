"""The gate's findings as records: a ``Verdict`` per metric, a ``GateResult`` for the run
(its status, exit code and gate.json body), the outcome names and the rule's text. How
verdicts are reached is in reports/gate.py, whose docstring states the whole rule.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from moeperf.reports.comparability import FingerprintCheck, SpecCheck

# Half: below it the gate has not looked at most of what the baseline measures, and a green
# check would vouch for numbers nobody compared. The shipped nightly spec judges about 70%.
MIN_JUDGED_SHARE = 0.5
COVERAGE_RULE = (
    f"a pass needs every load level of the baseline with at least one judged metric and at "
    f"least {MIN_JUDGED_SHARE:.0%} of the baseline's required metrics judged (judged = "
    "regression, significant below minimum effect, improvement or no change); otherwise "
    "the verdict is inconclusive (exit 1)"
)
RULE = (
    "regression = BH-adjusted one-sided p (Mann-Whitney for mean/median/p50, Brown-Mood "
    "quantile test for other percentiles) < alpha AND the bootstrap CI of candidate/baseline "
    "lies entirely beyond the minimum effect on the bad side; significant, below minimum "
    "effect = q < alpha but the CI excludes a material regression; improvement = CI entirely "
    "beyond the minimum effect on the good side; no change = CI excludes a material "
    "regression and q >= alpha; inconclusive = too few samples, a level invalid in either "
    "run (not judged), or neither; missing from "
    "candidate = a baseline metric the candidate lacks (optional ones excepted); reported = "
    "the headline tokens/window, shown, never tested; capacity (a capacity run's SLO "
    "search, levels compared, not samples: each probe is already a verdict on its level) = "
    "regression if the candidate failed at a level the baseline held (candidate "
    "failed_level <= baseline passed_level), improvement if it held a level the baseline "
    "failed (candidate passed_level >= baseline failed_level), else no change if both "
    "searches resolved, else inconclusive (a search not resolved, or the SLO criteria or "
    "load modes differ); missing from candidate if only the baseline has one; exit 1 on a "
    "regression, a missing metric, or too few judged"
)
OUTCOMES = (
    "regression",
    "missing from candidate",
    "significant, below minimum effect",
    "improvement",
    "no change",
    "inconclusive",
    "reported",
    "optional, missing from candidate",
    "only in candidate",
)
FAILING = ("regression", "missing from candidate")
JUDGED = ("regression", "significant, below minimum effect", "improvement", "no change")


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
    level: str = ""
    kind: str = "required"  # reports.samples.MetricKind
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
    # The capacity verdict only (reports.gate.capacity_verdict): the lowest level that
    # failed on each side; ``baseline`` and ``candidate`` are the highest that held.
    baseline_failed: float | None = None
    candidate_failed: float | None = None

    @property
    def key(self) -> str:
        return f"{self.name} {self.statistic}"

    @property
    def judged(self) -> bool:
        return self.outcome in JUDGED


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
    spec: SpecCheck | None = None
    # The minimum effects set for this gate (spec [gate] table, flags), by key.
    min_effects: Mapping[str, float] = field(default_factory=dict)

    def by_outcome(self, outcome: str) -> list[Verdict]:
        return [v for v in self.verdicts if v.outcome == outcome]

    @property
    def regressions(self) -> list[Verdict]:
        return self.by_outcome("regression")

    @property
    def failures(self) -> list[Verdict]:
        """Regressions and required metrics missing from the candidate."""
        return [v for v in self.verdicts if v.outcome in FAILING]

    @property
    def required(self) -> list[Verdict]:
        """The baseline's metrics the gate must judge (optional and reported ones excepted)."""
        return [
            v for v in self.verdicts if v.outcome != "only in candidate" and v.kind == "required"
        ]

    @property
    def judged(self) -> list[Verdict]:
        return [v for v in self.required if v.judged]

    @property
    def coverage_problem(self) -> str | None:
        """Why the gate judged too little to pass the run (``COVERAGE_RULE``), or None."""
        required, judged = self.required, self.judged
        if not required:
            return "the baseline has no metric to judge"
        unjudged_levels = [
            level
            for level in dict.fromkeys(v.level for v in required if v.level)
            if not any(v.level == level for v in judged)
        ]
        share = len(judged) / len(required)
        problems = []
        if unjudged_levels:
            problems.append(f"no metric judged at {', '.join(unjudged_levels)}")
        if share < MIN_JUDGED_SHARE:
            problems.append(
                f"only {len(judged)} of {len(required)} metrics judged ({share:.0%} < "
                f"{MIN_JUDGED_SHARE:.0%})"
            )
        return "; ".join(problems) or None

    @property
    def status(self) -> str:
        """ "fail", "inconclusive" or "pass" (the module docstring's rule)."""
        if self.failures:
            return "fail"
        return "inconclusive" if self.coverage_problem else "pass"

    @property
    def exit_code(self) -> int:
        return 0 if self.status == "pass" else 1

    @property
    def forced(self) -> list[str]:
        """What --force overrode: each differing fingerprint and spec field."""
        out = []
        if self.fingerprint is not None and self.fingerprint.forced:
            out.append(
                f"host fingerprint: baseline {self.fingerprint.baseline}, candidate "
                f"{self.fingerprint.candidate}"
            )
        if self.spec is not None and self.spec.forced:
            out += [f"spec {d.describe()}" for d in self.spec.differences]
        return out

    def to_dict(self) -> dict[str, Any]:
        return jsonable(
            {
                "baseline": self.baseline_label,
                "candidate": self.candidate_label,
                "status": self.status,
                "exit_code": self.exit_code,
                "rule": RULE,
                "coverage_rule": COVERAGE_RULE,
                "coverage_problem": self.coverage_problem,
                "judged": len(self.judged),
                "required": len(self.required),
                "alpha": self.alpha,
                "ci_level": self.ci_level,
                "bootstrap_resamples": self.n_boot,
                "seed": self.seed,
                "min_effects": dict(self.min_effects),
                "fingerprint": dataclasses.asdict(self.fingerprint) if self.fingerprint else None,
                "spec_check": dataclasses.asdict(self.spec) if self.spec else None,
                "forced": self.forced,
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
