"""A/A calibration of the gate: one target run 2 x ``pairs`` times, each pair gated
(second run against first), and how often the gate flagged a regression where there can
be none: per metric comparison, and per pair (any metric). Benjamini-Hochberg under no
change at all bounds the per-pair rate by alpha; the minimum effect should push it far
below. Targets are given as in paired mode (moeperf/gate_runs.py).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from moeperf.collectors.store import RunStore
from moeperf.gate_runs import (
    Say,
    gates_dir,
    load_serving_spec,
    parse_target,
    run_block,
    run_notes,
    started,
)
from moeperf.reports.gate import gate
from moeperf.reports.gate_output import text_table
from moeperf.reports.runs import load_run
from moeperf.reports.samples import run_samples
from moeperf.reports.verdicts import GateResult
from moeperf.suites.errors import UsageError


@dataclass(frozen=True)
class Calibration:
    """A/A runs of one target and how often the gate cried wolf."""

    alpha: float
    pairs: list[tuple[str, str, GateResult]]  # (baseline run, candidate run, result)

    @property
    def comparisons(self) -> int:
        """Metric comparisons that reached a verdict by test (not too few samples)."""
        return sum(1 for *_, r in self.pairs for v in r.verdicts if v.q_value is not None)

    @property
    def false_positives(self) -> int:
        return sum(len(r.regressions) for *_, r in self.pairs)

    @property
    def metric_rate(self) -> float:
        return self.false_positives / self.comparisons if self.comparisons else float("nan")

    @property
    def pair_rate(self) -> float:
        flagged = sum(1 for *_, r in self.pairs if r.regressions)
        return flagged / len(self.pairs) if self.pairs else float("nan")

    @property
    def raw_significant(self) -> int:
        """Comparisons with q < alpha, material or not: what the test alone would flag."""
        return sum(
            1
            for *_, r in self.pairs
            for v in r.verdicts
            if v.q_value is not None and v.q_value < self.alpha
        )

    def suggested_min_effects(self) -> dict[str, float]:
        """Per metric whose A/A intervals reached past its minimum effect: the smallest
        minimum effect (rounded up to 1%) that would have flagged none of these pairs, in
        either order. A lower bound from few pairs: calibrate with ten or more."""
        worst: dict[str, float] = {}
        for *_, result in self.pairs:
            for v in result.verdicts:
                if v.ci_low is None or v.ci_high is None or v.q_value is None:
                    continue
                assert v.min_effect is not None  # every tested metric has one
                if v.direction == "lower":  # bad side above 1; the reversed pair's too
                    excess = max(v.ci_low - 1, 1 / v.ci_high - 1)
                else:
                    excess = max(1 - v.ci_high, 1 - 1 / v.ci_low)
                if excess > v.min_effect:
                    worst[v.key] = max(worst.get(v.key, 0.0), excess)
        return {key: math.ceil(value * 100) / 100 for key, value in worst.items()}

    def to_dict(self) -> dict[str, Any]:
        return {
            "alpha": self.alpha,
            "suggested_min_effects": self.suggested_min_effects(),
            "pairs": [
                {"baseline": a, "candidate": b, "gate": r.to_dict()} for a, b, r in self.pairs
            ],
            "comparisons": self.comparisons,
            "false_positives": self.false_positives,
            "metric_false_positive_rate": self.metric_rate,
            "pair_false_positive_rate": self.pair_rate,
            "significant_but_not_material": self.raw_significant - self.false_positives,
        }


def calibrate_gate(
    spec_ref: str,
    pairs: int,
    runs_dir: str | Path = "runs",
    overrides: Sequence[str] = (),
    *,
    target: str = "synthetic",
    alpha: float = 0.05,
    min_effects: Mapping[str, float] | None = None,
    say: Say = lambda _line: None,
) -> Calibration:
    """Run ``target`` 2 x ``pairs`` times and gate each A/A pair (second against first)."""
    if pairs < 1:
        raise UsageError("pairs must be at least 1")
    spec = load_serving_spec(spec_ref, overrides).serving
    choice = parse_target(target, spec)
    store = RunStore(runs_dir)
    results = []
    with started([choice]) as (url,):
        for pair in range(pairs):
            a = run_block(spec_ref, overrides, url, store, say)
            b = run_block(spec_ref, overrides, url, store, say)
            result = gate(
                run_samples(load_run(store, b)),
                run_samples(load_run(store, a)),
                alpha=alpha,
                min_effects=min_effects,
                baseline_label=a,
                candidate_label=b,
            )
            result.notes.extend(run_notes(store, [a, b]))
            say(f"pair {pair + 1}/{pairs}: {len(result.regressions)} regression(s)")
            results.append((a, b, result))
    return Calibration(alpha, results)


def format_calibration(calibration: Calibration) -> str:
    rows = []
    for number, (a, b, r) in enumerate(calibration.pairs, start=1):
        tested = sum(1 for v in r.verdicts if v.q_value is not None)
        rows.append(
            (
                str(number),
                a,
                b,
                str(tested),
                str(len(r.regressions)),
                str(len(r.by_outcome("inconclusive"))),
                ", ".join(v.key for v in r.regressions) or "-",
            )
        )
    headers = ("pair", "A run", "A' run", "tested", "regressions", "inconclusive", "flagged")
    c = calibration
    return "\n".join(
        [
            text_table(headers, rows),
            f"A/A false positives: {c.false_positives} of {c.comparisons} metric comparisons "
            f"({c.metric_rate:.1%}); pairs with any regression: {c.pair_rate:.1%} of "
            f"{len(c.pairs)}; nominal alpha {c.alpha:g} (Benjamini-Hochberg per pair)",
            f"significant but below the minimum effect: {c.raw_significant - c.false_positives}",
            *(
                f"suggested minimum effect for {key}: {value:.0%} (A/A intervals reached past "
                "the current one)"
                for key, value in c.suggested_min_effects().items()
            ),
        ]
    )


def calibrate_command(
    spec_ref: str,
    pairs: int,
    runs_dir: str | Path = "runs",
    overrides: Sequence[str] = (),
    out_dir: str | Path | None = None,
    *,
    target: str = "synthetic",
    alpha: float = 0.05,
    min_effects: Mapping[str, float] | None = None,
    out: Say = print,
) -> int:
    """A/A calibration: print the table, write calibration.json into ``out_dir`` (default
    ``<runs_dir>/gates/<time>-calibration/``). Always 0: it measures, it does not judge."""
    calibration = calibrate_gate(
        spec_ref,
        pairs,
        runs_dir,
        overrides,
        target=target,
        alpha=alpha,
        min_effects=min_effects,
        say=out,
    )
    out(format_calibration(calibration))
    directory = Path(out_dir) if out_dir else gates_dir(runs_dir, "calibration")
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "calibration.json"
    body = {"target": target, "spec": spec_ref, **calibration.to_dict()}
    path.write_text(json.dumps(_finite(body), indent=2), encoding="utf-8")
    out(f"written: {path}")
    return 0


def _finite(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    if isinstance(value, float) and value != value:
        return None
    return value
