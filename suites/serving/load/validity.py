"""Judging whether the client, not the target, set a level's numbers."""

from __future__ import annotations

from collectors.serving_records import WorkerSummary


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
