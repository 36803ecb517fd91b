"""How a drill's run ends: what it measured decides, not how many requests the faults
failed (failing them is what a drill is for)."""

from __future__ import annotations

from moeperf.collectors.drill_records import DrillSummary
from moeperf.collectors.request_audit import audit_text


def drill_verdict(drill: DrillSummary, status: str, reason: str | None) -> tuple[str, str | None]:
    """The run's status and reason, given the levels' own (``run_verdict``'s).

    A fault that could not be injected fails the run (the drill did not happen as
    specified); records that are not exactly the requests sent make it invalid (its
    counts cannot be trusted), and so does a window the target says caught no request
    (that fault was not tested: nothing reached the target while it was open). Otherwise
    the levels' verdict stands: a target that failed most requests of the level failed,
    with or without a drill.
    """
    missed = [f for f in drill.faults if not f.injected]
    if missed:
        first = missed[0]
        return "failed", f"drill fault {first.index} ({first.kind}) not injected: {first.detail}"
    if not drill.audit.exact:
        return "invalid", audit_text(drill.audit)
    untested = [f for f in drill.faults if f.requests_hit == 0]
    if untested:
        first = untested[0]
        return "invalid", (
            f"drill fault {first.index} ({first.kind}) caught no request in its "
            f"{first.fault_s:.2f} s: not tested (lengthen its for_s or raise the load)"
        )
    return status, reason
