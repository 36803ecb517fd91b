"""The report of a baseline: its trend across versions and change-point warnings."""

import numpy as np

from moeperf.collectors.records import RequestRecord
from moeperf.collectors.store import RunStore
from moeperf.collectors.summary import summarize_requests
from moeperf.collectors.tables import records_frame
from moeperf.reports.baseline_report import baseline_report_command
from moeperf.reports.baselines import BaselineStore

MS = 1_000_000


def make_run(store: RunStore, ttft_ms: float, seed: int) -> str:
    rng = np.random.default_rng(seed)
    run = store.create("serving", spec_given={"name": "<b>spec</b>"})
    records = []
    for i in range(40):
        first = int((ttft_ms + rng.normal(0, 1)) * MS)
        chunks = [first + k * 10 * MS for k in range(8)]
        record = RequestRecord(
            request_id=f"r{i}", scenario="c=4", phase="measure", worker=0,
            intended_send_ns=i * 100 * MS, send_ns=i * 100 * MS,
            done_ns=i * 100 * MS + chunks[-1], status="ok",
            chunk_ns=[i * 100 * MS + c for c in chunks], chunk_tokens=[1] * 8,
            first_token_ns=i * 100 * MS + chunks[0], last_token_ns=i * 100 * MS + chunks[-1],
            output_tokens=8,
        )  # fmt: skip
        records.append(record)
        run.append_request(record)
    run.write_summary(summarize_requests(records_frame(records)))
    run.complete()
    return run.run_id


def test_trend_over_versions_with_a_level_shift(tmp_path):
    runs = RunStore(tmp_path / "runs")
    baselines = BaselineStore(tmp_path / "baselines")
    # Six versions at 50 ms TTFT, then four at 80 ms: a level shift in the recent history.
    for version, ttft_ms in enumerate([50] * 6 + [80] * 4):
        run_id = make_run(runs, ttft_ms, seed=version)
        baselines.promote(runs.root / run_id, "demo")
    printed: list[str] = []
    out = tmp_path / "report.html"
    code = baseline_report_command("demo", str(tmp_path / "baselines"), str(out), printed.append)
    assert code == 0 and printed == [str(out)]
    page = out.read_text(encoding="utf-8")
    assert "Baseline demo: trend across versions" in page
    assert "v10" in page and "c=4 ttft_s.p50" in page
    # The shift is warned about (a warning, not a failure), and strings stay escaped.
    assert "trend warnings, not failures" in page and "(worse)" in page
    assert "<b>spec</b>" not in page
