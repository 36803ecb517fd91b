"""An elasticity drill's events judged (collectors/elastic_records.py defines the figures):

- scale_in: pass when it lost no request (a graceful scale-in must not);
- kill: pass when no request sent after the kill failed (only those in flight on the
  killed replica were lost) and the level recovered within ``max_recovery_s``;
- scale_out, restart: pass when the replica served its first request within
  ``max_first_served_s`` of the action's start;
- an action that could not be carried out fails.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from moeperf.collectors.drill_records import DrillSummary, FaultOutcome
from moeperf.collectors.elastic_records import (
    ElasticAction,
    ElasticEvent,
    ElasticSummary,
    EventVerdict,
)
from moeperf.collectors.latency import NS_PER_S


def summarize_elastic(
    drill: DrillSummary,
    actions: Sequence[ElasticAction],
    requests: pd.DataFrame,
    *,
    router: str,
    replicas_started: int,
    shares: Mapping[int, float],
    max_recovery_s: float,
    max_first_served_s: float,
) -> ElasticSummary:
    """Each action beside its drill outcome (the same index), judged."""
    outcomes = {o.index: o for o in drill.faults}
    level = requests[requests["scenario"] == drill.scenario]
    starts_ns = [drill.level_start_ns + int(o.at_s * NS_PER_S) for o in drill.faults]
    events = []
    for action in actions:
        outcome = outcomes[action.index]
        lost: tuple[int, int] | None = None
        if action.action == "kill" and outcome.injected:
            later = [t for t in starts_ns if t > starts_ns[action.index]]
            lost = _lost(level, starts_ns[action.index], later[0] if later else None)
        verdict, why = _judge(action, outcome, lost, max_recovery_s, max_first_served_s)
        events.append(
            ElasticEvent(
                index=action.index, action=action.action, replica=action.replica,
                at_s=outcome.at_s, done=outcome.injected, detail=outcome.detail,
                in_flight=action.in_flight, first_served_s=action.first_served_s,
                drained_s=action.drained_s, failed=outcome.failed,
                failed_by_type=outcome.failed_by_type, recovery_s=outcome.recovery_s,
                verdict=verdict, why=why, lost_in_flight=lost[0] if lost else None,
                lost_after=lost[1] if lost else None,
            )
        )  # fmt: skip
    return ElasticSummary(router, replicas_started, tuple(events), dict(shares))


def _lost(level: pd.DataFrame, kill_ns: int, next_ns: int | None) -> tuple[int, int]:
    """A kill's failed requests (ended after it, before the next event): (sent before it,
    sent after it)."""
    failed = (level["status"] != "ok") & (level["done_ns"] >= kill_ns)
    if next_ns is not None:
        failed &= level["send_ns"] < next_ns
    before = failed & (level["send_ns"] < kill_ns)
    return int(before.sum()), int((failed & ~before).sum())


def _judge(
    action: ElasticAction,
    outcome: FaultOutcome,
    lost: tuple[int, int] | None,
    max_recovery_s: float,
    max_first_s: float,
) -> tuple[EventVerdict, str]:
    if not outcome.injected:
        return "fail", f"the {action.action} could not be carried out: {outcome.detail}"
    if action.action == "scale_in":
        if outcome.failed:
            return (
                "fail",
                f"a graceful scale-in lost {outcome.failed} request(s) ({_by_type(outcome)})",
            )
        return "pass", "lost no request"
    if action.action == "kill":
        assert lost is not None
        return _judge_kill(action, outcome, lost, max_recovery_s)
    first = action.first_served_s
    if first is None:
        return "fail", f"replica {action.replica} served no request within {max_first_s:g} s"
    if first > max_first_s:
        return "fail", (
            f"replica {action.replica} served its first request after {first:.2f} s > "
            f"{max_first_s:g} s"
        )
    return "pass", f"first request served after {first:.2f} s <= {max_first_s:g} s"


def _judge_kill(
    action: ElasticAction, outcome: FaultOutcome, lost: tuple[int, int], max_recovery_s: float
) -> tuple[EventVerdict, str]:
    in_flight, after = lost
    held = "" if action.in_flight is None else f" (its /metrics said it held {action.in_flight:g})"
    if after:
        return "fail", (
            f"{after} request(s) sent after the kill failed: the router went on sending to "
            f"the dead replica, or did not retry elsewhere; {in_flight} in flight were lost{held}"
        )
    recovery = outcome.recovery_s
    if recovery is None:
        return "fail", "no request succeeded after the kill before the level ended"
    if recovery > max_recovery_s:
        return "fail", f"recovered after {recovery:.2f} s > {max_recovery_s:g} s"
    return "pass", (
        f"lost only the {in_flight} request(s) in flight on it{held}; none sent after failed; "
        f"recovered after {recovery:.2f} s <= {max_recovery_s:g} s"
    )


def _by_type(outcome: FaultOutcome) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(outcome.failed_by_type.items())) or "none"
