"""Judging a level, then a run: did the target fail it, did the client set its numbers?

The rule (also in docs/concepts/run-status.md):
- A level whose measured requests mostly did not end ok (more than ``FAILED_SHARE`` of
  them errored, or were cancelled when the drain timeout ran out) is ``failed``: the
  target's failure, reported with its error types and counts first. The client-bound
  checks are not applied to it: a client that is failing is not busy measuring.
- Otherwise a level over any ``[harness]`` limit is ``invalid`` (client-bound); otherwise
  ``ok``.
- A run with a failed level ends ``failed``; else with an invalid level ``invalid``; else
  ``complete``. Its reason names every level that is not ok, and why. The ok levels'
  results are kept whole either way.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from moeperf.collectors.manifest import RunStatus
from moeperf.collectors.records import RequestRecord
from moeperf.collectors.serving_records import LevelStatus, WorkerSummary

# More than this share of a level's measured requests not ok: the level failed.
FAILED_SHARE = 0.5


@dataclass(frozen=True, slots=True)
class LevelCounts:
    """How a level's measured requests ended."""

    requests: int
    ok: int
    cancelled: int
    error_types: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class LevelVerdict:
    scenario: str
    status: LevelStatus
    reason: str | None = None
    # Kept for the summary only when the level is judged client-bound.
    client_bottleneck: tuple[str, ...] = ()


def measured_counts(records: Iterable[RequestRecord], scenario: str) -> LevelCounts:
    """How the measured requests of one level ended, from its records."""
    measured = [r for r in records if r.scenario == scenario and r.phase == "measure"]
    errors = Counter(r.error_type or "unknown" for r in measured if r.status == "error")
    return LevelCounts(
        requests=len(measured),
        ok=sum(r.status == "ok" for r in measured),
        cancelled=sum(r.status == "cancelled" for r in measured),
        error_types=dict(errors),
    )


class MeasuredTally:
    """``measured_counts`` of every level, counted as each request's record arrives.

    The runner keeps these counts instead of the records, so its memory does not grow
    with a level's length. Each request is added once, with the record it ends with (a
    later amendment adds client-side token counts and never changes how it ended).
    """

    def __init__(self) -> None:
        self._requests: Counter[str] = Counter()
        self._ok: Counter[str] = Counter()
        self._cancelled: Counter[str] = Counter()
        self._errors: dict[str, Counter[str]] = {}

    def add(self, record: RequestRecord) -> None:
        if record.phase != "measure":
            return
        scenario = record.scenario
        self._requests[scenario] += 1
        if record.status == "ok":
            self._ok[scenario] += 1
        elif record.status == "cancelled":
            self._cancelled[scenario] += 1
        elif record.status == "error":
            errors = self._errors.setdefault(scenario, Counter())
            errors[record.error_type or "unknown"] += 1

    def counts(self, scenario: str) -> LevelCounts:
        return LevelCounts(
            requests=self._requests[scenario],
            ok=self._ok[scenario],
            cancelled=self._cancelled[scenario],
            error_types=dict(self._errors.get(scenario, {})),
        )


def error_counts_text(error_types: Mapping[str, int]) -> str:
    """ "connect_error 58, http_5xx 2": most frequent first."""
    ranked = sorted(error_types.items(), key=lambda item: (-item[1], item[0]))
    return ", ".join(f"{name} {count}" for name, count in ranked)


def target_failure(counts: LevelCounts) -> str | None:
    """Why the level failed for the target's reasons, error types first; None if it did not."""
    if counts.requests == 0:
        return "no measured requests (every request fell in warm-up or cool-down, or none ran)"
    failed = counts.requests - counts.ok
    if failed <= FAILED_SHARE * counts.requests:
        return None
    parts = [error_counts_text(counts.error_types)] if counts.error_types else []
    if counts.cancelled:
        parts.append(f"cancelled {counts.cancelled} (not done when the level ended)")
    return f"{'; '.join(parts)}: {failed} of {counts.requests} measured requests failed"


def judge_level(scenario: str, counts: LevelCounts, client_reasons: Sequence[str]) -> LevelVerdict:
    failure = target_failure(counts)
    if failure is not None:
        return LevelVerdict(scenario, "failed", failure)
    if client_reasons:
        reason = "client was the bottleneck: " + "; ".join(client_reasons)
        return LevelVerdict(scenario, "invalid", reason, tuple(client_reasons))
    return LevelVerdict(scenario, "ok")


def run_verdict(levels: Sequence[LevelVerdict]) -> tuple[RunStatus, str | None]:
    """The status a run that ran to its end gets from its levels, with the reason."""
    failed = [v for v in levels if v.status == "failed"]
    invalid = [v for v in levels if v.status == "invalid"]
    parts = []
    if failed:
        parts.append("levels failed: " + "; ".join(f"{v.scenario} ({v.reason})" for v in failed))
    if invalid:
        parts.append("levels invalid: " + "; ".join(f"{v.scenario} ({v.reason})" for v in invalid))
    reason = " | ".join(parts) or None
    if failed:
        return "failed", reason
    if invalid:
        return "invalid", reason
    return "complete", None


def client_bottlenecks(
    reports: list[WorkerSummary],
    *,
    open_loop: bool,
    capped: bool,
    max_loop_lag_p99_s: float,
    max_cpu_fraction: float,
    min_achieved_rate_ratio: float,
) -> list[str]:
    """Reasons this level's measurements may be the client's, empty when it was sound."""
    reasons = []
    for report in reports:
        watch = report.selfwatch
        who = f"worker {report.worker}"
        if watch.loop_lag_p99_s > max_loop_lag_p99_s:
            reasons.append(
                f"{who}: event-loop lag p99 {watch.loop_lag_p99_s * 1e3:.2f} ms > "
                f"{max_loop_lag_p99_s * 1e3:.2f} ms"
            )
        if watch.cpu_fraction > max_cpu_fraction:
            reasons.append(
                f"{who}: client CPU {watch.cpu_fraction:.0%} of a core > {max_cpu_fraction:.0%}"
            )
    offered = sum(r.offered for r in reports)
    sent = sum(r.sent for r in reports)
    # With a cap on requests in flight, a slow target also delays sends: not the client's.
    if open_loop and not capped and offered and sent / offered < min_achieved_rate_ratio:
        reasons.append(
            f"sent {sent} of {offered} scheduled requests within the window "
            f"({sent / offered:.0%} < {min_achieved_rate_ratio:.0%})"
        )
    return reasons


class HarnessLimits(Protocol):
    """The ``[harness]`` limits a level is judged by (``suites.spec.HarnessSpec``)."""

    max_loop_lag_p99_s: float
    max_cpu_fraction: float
    min_achieved_rate_ratio: float


def judged_level(
    harness: HarnessLimits,
    scenario: str,
    reports: list[WorkerSummary],
    records: Iterable[RequestRecord],
    *,
    open_loop: bool,
    capped: bool = False,
) -> LevelVerdict:
    """One level's verdict from its workers' reports and its request records."""
    reasons = client_bottlenecks(
        reports,
        open_loop=open_loop,
        capped=capped,
        max_loop_lag_p99_s=harness.max_loop_lag_p99_s,
        max_cpu_fraction=harness.max_cpu_fraction,
        min_achieved_rate_ratio=harness.min_achieved_rate_ratio,
    )
    return judge_level(scenario, measured_counts(records, scenario), reasons)
