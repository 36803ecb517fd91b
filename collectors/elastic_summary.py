"""An elasticity drill's events judged (collectors/elastic_records.py defines the figures):

- scale_in: pass when it lost no request (a graceful scale-in must not);
- kill: pass when no request sent after the router's detection time (``detection_s``: its
  health-check interval x failure threshold; 0 without health checks) failed, so that
  only those in flight on the killed replica, and those the router sent it before it could
  know, were lost; and the level recovered within ``max_recovery_s``;
- scale_out, restart: pass when the replica served its first request within
  ``max_first_served_s`` of the action's start; a scale-out with ``min_scale_out_ratio``
  also needs its output tok/s after to reach that fraction of before x (N + 1) / N, N the
  replicas serving before it (a level the replicas could not keep busy does not scale);
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
from moeperf.collectors.latency import NS_PER_S, per_request


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
    min_scale_out_ratio: float | None = None,
    detection_s: float = 0.0,
) -> ElasticSummary:
    """Each action beside its drill outcome (the same index), judged."""
    outcomes = {o.index: o for o in drill.faults}
    level = requests[requests["scenario"] == drill.scenario]
    tokens = per_request(level)["output_tokens"].where(level["status"] == "ok")
    window_ns = int(drill.compare_window_s * NS_PER_S)
    starts_ns = [drill.level_start_ns + int(o.at_s * NS_PER_S) for o in drill.faults]
    events = []
    for action in actions:
        outcome = outcomes[action.index]
        start_ns = starts_ns[action.index]
        later = [t for t in starts_ns if t > start_ns]
        next_ns = later[0] if later else None
        lost: tuple[int, int, int] | None = None
        if action.action == "kill" and outcome.injected:
            struck_ns = action.struck_ns if action.struck_ns is not None else start_ns
            lost = _lost(level, struck_ns, next_ns, int(detection_s * NS_PER_S))
        end_ns = start_ns + int(outcome.fault_s * NS_PER_S)
        before = _rate(level, tokens, start_ns - window_ns, start_ns)
        after_end = end_ns + window_ns if next_ns is None else min(end_ns + window_ns, next_ns)
        after = _rate(level, tokens, end_ns, after_end)
        verdict, why = _judge(action, outcome, lost, max_recovery_s, max_first_served_s,
                              detection_s)  # fmt: skip
        if verdict == "pass" and action.action == "scale_out" and min_scale_out_ratio:
            verdict, why = _judge_scale(action, (before, after), min_scale_out_ratio, why)
        events.append(
            ElasticEvent(
                index=action.index, action=action.action, replica=action.replica,
                at_s=outcome.at_s, done=outcome.injected, detail=outcome.detail,
                in_flight=action.in_flight, first_served_s=action.first_served_s,
                drained_s=action.drained_s, failed=outcome.failed,
                failed_by_type=outcome.failed_by_type, recovery_s=outcome.recovery_s,
                verdict=verdict, why=why, lost_in_flight=lost[0] if lost else None,
                lost_undetected=lost[1] if lost else None,
                lost_after=lost[2] if lost else None, output_tok_s_before=before,
                output_tok_s_after=after, serving_before=action.serving_before,
            )
        )  # fmt: skip
    return ElasticSummary(router, replicas_started, tuple(events), dict(shares))


def _rate(level: pd.DataFrame, tokens: pd.Series, low_ns: int, high_ns: int) -> float | None:
    """Output tokens/s of the ok requests that ended in [low, high); None: an empty window."""
    if high_ns <= low_ns:
        return None
    ended = (level["done_ns"] >= low_ns) & (level["done_ns"] < high_ns)
    return float(tokens[ended].sum()) / ((high_ns - low_ns) / NS_PER_S)


def _judge_scale(
    action: ElasticAction,
    rates: tuple[float | None, float | None],
    ratio: float,
    served: str,
) -> tuple[EventVerdict, str]:
    before, after = rates
    serving = action.serving_before
    if before is None or after is None or not before or not serving:
        return "not judged", f"{served}; no output tok/s before and after to compare"
    wanted = ratio * (serving + 1) / serving
    got = after / before
    if got < wanted:
        return "fail", (
            f"{served}; but output tok/s went {before:.0f} -> {after:.0f} ({got:.2f}x), below "
            f"{ratio:g} x {serving + 1}/{serving} = {wanted:.2f}x"
        )
    return (
        "pass",
        f"{served}; output tok/s {before:.0f} -> {after:.0f} ({got:.2f}x >= {wanted:.2f}x)",
    )


def _lost(
    level: pd.DataFrame, kill_ns: int, next_ns: int | None, detection_ns: int
) -> tuple[int, int, int]:
    """A kill's failed requests (ended after it, before the next event): (sent before it,
    sent within the router's detection time after it, sent later)."""
    failed = (level["status"] != "ok") & (level["done_ns"] >= kill_ns)
    if next_ns is not None:
        failed &= level["send_ns"] < next_ns
    before = failed & (level["send_ns"] < kill_ns)
    undetected = failed & ~before & (level["send_ns"] < kill_ns + detection_ns)
    later = failed & ~before & ~undetected
    return int(before.sum()), int(undetected.sum()), int(later.sum())


def _judge(
    action: ElasticAction,
    outcome: FaultOutcome,
    lost: tuple[int, int, int] | None,
    max_recovery_s: float,
    max_first_s: float,
    detection_s: float = 0.0,
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
        return _judge_kill(action, outcome, lost, max_recovery_s, detection_s)
    first = action.first_served_s
    if first is None:
        return "fail", (
            f"replica {action.replica} served no request within {max_first_s:g} s of the "
            "event's start, or before the level ended"
        )
    if first > max_first_s:
        return "fail", (
            f"replica {action.replica} served its first request after {first:.2f} s > "
            f"{max_first_s:g} s"
        )
    return "pass", f"first request served after {first:.2f} s <= {max_first_s:g} s"


def _judge_kill(
    action: ElasticAction,
    outcome: FaultOutcome,
    lost: tuple[int, int, int],
    max_recovery_s: float,
    detection_s: float,
) -> tuple[EventVerdict, str]:
    in_flight, undetected, after = lost
    held = "" if action.in_flight is None else f" (its /metrics said it held {action.in_flight:g})"
    early = (
        f" and {undetected} sent in the router's {detection_s:g} s to notice" if undetected else ""
    )
    if after:
        return "fail", (
            f"{after} request(s) sent more than {detection_s:g} s after the kill failed: the "
            f"router went on sending to the dead replica, or did not retry elsewhere; "
            f"{in_flight} in flight were lost{held}{early}"
        )
    recovery = outcome.recovery_s
    if recovery is None:
        return "fail", "no request succeeded after the kill before the level ended"
    if recovery > max_recovery_s:
        return "fail", f"recovered after {recovery:.2f} s > {max_recovery_s:g} s"
    return "pass", (
        f"lost the {in_flight} request(s) in flight on it{held}{early}; none sent later "
        f"failed; recovered after {recovery:.2f} s <= {max_recovery_s:g} s"
    )


def _by_type(outcome: FaultOutcome) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(outcome.failed_by_type.items())) or "none"
