"""Whether one probe (a load level) held the capacity search's SLOs, and why.

A criterion holds when its point estimate is within its limit: TTFT p99 and TPOT p99
(numpy linear quantiles of the level's measured ok requests) at most their limits,
goodput ratio at least its minimum. Each reason gives the estimate with its 95% interval;
an interval that spans the limit is called marginal (a longer probe would decide it more
surely), and one that could not be computed says so. A level the target failed (most of
its requests failed) fails; a client-bound level cannot be judged (the harness may have
set its numbers), which stops the search.
"""

from __future__ import annotations

from typing import Protocol

from moeperf.collectors.quantiles import Described
from moeperf.collectors.serving_records import ScenarioSummary
from moeperf.suites.serving.capacity.search import Verdict


class Criteria(Protocol):
    """A level's SLO criteria: [capacity]'s, or [deploy_sweep]'s (None: not a criterion)."""

    @property
    def ttft_p99_s(self) -> float | None: ...
    @property
    def tpot_p99_s(self) -> float | None: ...
    @property
    def min_goodput_ratio(self) -> float | None: ...


def criteria_text(capacity: Criteria) -> str:
    parts = []
    if capacity.ttft_p99_s is not None:
        parts.append(f"TTFT p99 <= {capacity.ttft_p99_s:g} s")
    if capacity.tpot_p99_s is not None:
        parts.append(f"TPOT p99 <= {capacity.tpot_p99_s:g} s")
    if capacity.min_goodput_ratio is not None:
        parts.append(f"goodput ratio >= {capacity.min_goodput_ratio:g}")
    return " and ".join(parts)


def _p99(name: str, described: Described, limit_s: float) -> tuple[bool, str]:
    estimate = described.at(0.99)
    if estimate is None:
        return False, f"{name} p99 not measured (no ok requests)"
    held = estimate.value <= limit_s
    text = f"{name} p99 {estimate.value:.4g} s {'<=' if held else '>'} {limit_s:g} s"
    if estimate.ci_low is None or estimate.ci_high is None:
        return held, text + " (too few samples for an interval)"
    text += f" [95% {estimate.ci_low:.4g}, {estimate.ci_high:.4g}]"
    if estimate.ci_low <= limit_s <= estimate.ci_high:
        text += " (marginal: the interval spans the limit)"
    return held, text


def judge_probe(entry: ScenarioSummary, capacity: Criteria) -> Verdict:
    """The verdict of one level's summary (its status set by the runner)."""
    if entry.status == "invalid":
        return Verdict(None, f"not judged: {entry.status_reason or 'client-bound'}")
    if entry.status == "failed":
        return Verdict(False, f"the target failed the level: {entry.status_reason}")
    results: list[tuple[bool, str]] = []
    if capacity.ttft_p99_s is not None:
        results.append(_p99("TTFT", entry.latency_s.ttft_s, capacity.ttft_p99_s))
    if capacity.tpot_p99_s is not None:
        results.append(_p99("TPOT", entry.latency_s.tpot_s, capacity.tpot_p99_s))
    if capacity.min_goodput_ratio is not None:
        ratio = entry.goodput_ratio
        held = ratio is not None and ratio >= capacity.min_goodput_ratio
        shown = "not measured" if ratio is None else f"{ratio:.3f}"
        sign = ">=" if held else "<"
        results.append((held, f"goodput ratio {shown} {sign} {capacity.min_goodput_ratio:g}"))
    return Verdict(all(held for held, _ in results), "; ".join(text for _, text in results))
