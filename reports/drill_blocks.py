"""A fault drill in the report: a row per fault, the request audit, and the level over
time with each fault marked. The same content as the terminal's table; definitions in
``collectors.drill_records`` (quoted in the page's appendix)."""

from __future__ import annotations

import pandas as pd

from moeperf.collectors.drill_records import DrillSummary
from moeperf.collectors.units import to_ms
from moeperf.reports.figures.drill import drill_chart
from moeperf.reports.render import Chart, Table


def drill_blocks(drill: DrillSummary, requests: pd.DataFrame) -> list[Chart | Table]:
    faults = pd.DataFrame(
        [
            {
                "fault": f.kind if f.injected else f"{f.kind} (NOT INJECTED)",
                "at s": f.at_s,
                "fault s": f.fault_s,
                "caught": f.requests_hit,
                "failed": f.failed,
                "why": ", ".join(f"{k}={v}" for k, v in sorted(f.failed_by_type.items())) or "-",
                "recovery s": f.recovery_s,
                "TTFT p50 before ms": to_ms(f.before.ttft_p50_s),
                "TTFT p50 during ms": to_ms(f.during.ttft_p50_s),
                "TTFT p50 after ms": to_ms(f.after.ttft_p50_s),
                "E2E p50 before ms": to_ms(f.before.e2e_p50_s),
                "E2E p50 after ms": to_ms(f.after.e2e_p50_s),
                "what was done": f.detail,
            }
            for f in drill.faults
        ]
    )
    audit = drill.audit
    audit_frame = pd.DataFrame(
        [
            {
                "sent": audit.sent,
                "recorded": audit.recorded,
                "missing": audit.missing,
                "unknown": audit.unknown,
                "recorded twice": audit.duplicated,
                "verdict": "exact" if audit.exact else "NOT EXACT",
                "examples": ", ".join(audit.examples) or "-",
            }
        ]
    )
    return [
        Table(
            faults,
            "Fault drill: per fault, from the level's start. fault s: the fault itself; "
            "recovery s: its injection to the end of the first successful request sent "
            "after it (blank: none before the level ended); caught: the requests the "
            "target says a window fault caught (0: that fault was not tested; blank: not "
            "a window); failed: requests that ended "
            "failed between the injection and the recovery; latencies: p50 of the ok "
            f"requests sent in the {drill.compare_window_s:g} s before the injection, "
            "between injection and recovery, and in the same window after the recovery.",
            answers=True,
        ),
        Table(
            audit_frame,
            "Request audit: every request a load worker sent (each numbers its own) is in "
            "the records exactly once.",
            answers=True,
        ),
        Chart(
            drill_chart(drill, requests),
            "Requests by outcome as they ended; shaded: each fault; dotted: its recovery.",
            drawn_by=("drill",),
        ),
    ]
