"""A soak in the report: its verdicts, its windows, and the series over time. The same
content as the terminal's tables; definitions in ``collectors.soak_records`` and the
rules in ``collectors.soak_verdicts`` (both quoted in the page's appendix)."""

from __future__ import annotations

import pandas as pd

from moeperf.collectors.soak_records import SoakSummary
from moeperf.reports.figures.soak import soak_chart
from moeperf.reports.render import Chart, Table

MIB = 2**20


def _scaled(value: float | None, scale: float) -> float | None:
    return None if value is None else value * scale


def soak_blocks(soak: SoakSummary) -> list[Chart | Table]:
    verdicts = pd.DataFrame(
        [
            {
                "verdict": v.name,
                "outcome": v.outcome,
                "fails the run when found": "yes" if v.fails_run else "no",
                "why": v.reason,
            }
            for v in soak.verdicts
        ]
    )
    windows = pd.DataFrame(
        [
            {
                "window": w.index,
                "start s": w.start_s,
                "ok": w.requests_ok,
                "failed": w.requests_failed,
                "output tok/s": w.output_tok_s,
                "TTFT p50 ms": _scaled(w.ttft_p50_s, 1e3),
                "TTFT p99 ms": _scaled(w.ttft_p99_s, 1e3),
                "TPOT p50 ms": _scaled(w.tpot_p50_s, 1e3),
                "RSS MiB": _scaled(w.rss_bytes, 1 / MIB),
                "RSS samples": w.rss_samples,
                "KV usage %": _scaled(w.kv_usage_ratio, 100),
                "preemptions": w.preemptions,
            }
            for w in soak.windows
        ]
    )
    return [
        Table(
            verdicts,
            f"Soak ({soak.scenario}): verdicts. Slopes are least squares over the "
            f"{len(soak.windows)} windows of {soak.window_s:g} s with a 95% interval (t, n - 2 "
            "degrees of freedom); a verdict is found only when the whole interval clears its "
            "threshold, so an interval that includes zero is never a finding.",
            answers=True,
        ),
        Table(
            windows,
            "Soak windows, from the level's start: requests by intended send time; output "
            "tok/s by chunk arrival; RSS the mean of the target's memory samples in the "
            f"window ({soak.memory_source}, every {soak.memory_interval_s:g} s); KV usage and "
            "preemptions from the target's own metrics (blank: not reported).",
        ),
        Chart(
            soak_chart(soak),
            "One point per window; dashed: the least-squares line behind each slope.",
            drawn_by=("soak",),
        ),
    ]
