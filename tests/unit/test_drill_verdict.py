"""How a drill's faults decide its run's status (suites/serving/faults/verdict.py): each
rule on a summary built by hand, with the levels' own verdict passed in."""

from __future__ import annotations

import dataclasses

from moeperf.collectors.drill_records import DrillSummary, FaultOutcome, LatencyWindow
from moeperf.collectors.request_audit import audit_requests
from moeperf.suites.serving.faults.verdict import drill_verdict

NONE = LatencyWindow(0, None, None)


def _fault(index: int, kind: str, requests_hit: int | None, injected: bool = True) -> FaultOutcome:
    return FaultOutcome(
        index=index,
        kind=kind,
        at_s=2.0 + index,
        fault_s=1.0,
        injected=injected,
        detail="what was done",
        failed=requests_hit or 0,
        failed_by_type={},
        recovery_s=1.2,
        before=NONE,
        during=NONE,
        after=NONE,
        requests_hit=requests_hit,
    )


def _drill(*faults: FaultOutcome, exact: bool = True) -> DrillSummary:
    ids = ["w0-0", "w0-1"] if exact else ["w0-0"]
    return DrillSummary(
        scenario="rate=20",
        level_start_ns=0,
        compare_window_s=1.5,
        faults=faults,
        audit=audit_requests(ids, {0: 2}),
        statuses={"ok": 2},
    )


def test_a_drill_whose_faults_were_injected_and_caught_requests_keeps_the_levels_verdict():
    drill = _drill(_fault(0, "kill", None), _fault(1, "http_error", 12))
    assert drill_verdict(drill, "completed", None) == ("completed", None)
    assert drill_verdict(drill, "failed", "most failed") == ("failed", "most failed")


def test_a_window_that_caught_no_request_makes_the_run_invalid_and_names_it():
    drill = _drill(_fault(0, "reset", 9), _fault(1, "malformed", 0))
    status, reason = drill_verdict(drill, "completed", None)
    assert status == "invalid"
    assert reason is not None
    assert "drill fault 1 (malformed) caught no request" in reason and "not tested" in reason


def test_a_fault_not_injected_fails_the_run_before_any_other_rule():
    missed = dataclasses.replace(_fault(0, "kill", None), injected=False, detail="no restart")
    drill = _drill(missed, _fault(1, "malformed", 0), exact=False)
    assert drill_verdict(drill, "completed", None) == (
        "failed",
        "drill fault 0 (kill) not injected: no restart",
    )


def test_records_that_are_not_the_requests_sent_make_the_run_invalid():
    status, reason = drill_verdict(_drill(_fault(0, "kill", None), exact=False), "completed", None)
    assert status == "invalid" and reason is not None and "missing" in reason
