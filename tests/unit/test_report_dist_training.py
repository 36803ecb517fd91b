"""The report's section for suite "training-dist": its tables, the time-split chart, and
that scenario names stay text (reports.figures.dist_training, reports.report)."""

from __future__ import annotations

import html
import inspect
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import moeperf.reports.figures.dist_training
from moeperf.collectors.dist_training_summary import (
    DistScenarioSummary,
    DistTrainingSummary,
    LinkCalibration,
    RecoverySummary,
    TimeShares,
)
from moeperf.collectors.records import StepRecord
from moeperf.collectors.store import RunStore
from moeperf.collectors.tables import SCHEMAS, rows_to_table, table_to_frame
from moeperf.collectors.training_summary import PeakFlopsSummary
from moeperf.registry import find_suite
from moeperf.reports.figures.dist_training import (
    layout_frame,
    link_frame,
    rank_frame,
    recovery_frame,
    time_split_chart,
)
from moeperf.reports.render import Chart, Table
from moeperf.reports.report import build_report, run_section
from moeperf.reports.runs import RunData, load_run
from moeperf.reports.training_blocks import dist_training_blocks as _dist_training_blocks

MIB = 2**20
MS = 1_000_000
XSS_SCRIPT = "<script>alert(1)</script>"
PP = "pp2/keep-all/calm"
EP = XSS_SCRIPT + "/ep2"  # a user-supplied scenario name


def scenario(**overrides: Any) -> DistScenarioSummary:
    base: dict[str, Any] = dict(
        layout="pp2", ep=1, pp=2, dp=1, world_size=2, policy="keep-all", skew="calm",
        budget_bytes=None, steps=6, attempts=1, stopped=None, job_step_s_p50=0.5,
        tokens_per_s=2048.0, effective_tokens_per_s=1500.0, mfu=0.123,
        shares=TimeShares(compute=0.6, all_to_all=0.0, pipeline=0.25, all_reduce=0.1,
                          wait=0.05),
        bubble=0.3, bubble_formula=(2 - 1) / (4 + 2 - 1),
        peak_memory_bytes_by_rank=[2 * MIB, 3 * MIB + MIB // 2],
        compute_s_p50_by_rank=[0.25, 0.4], slowest_rank=1, straggler_spread=0.375,
        ooms=0, oom_rate=0.0, loss_first=8.3, loss_last=8.2, all_to_all_bytes_per_s=None,
        recoveries=[],
    )  # fmt: skip
    base.update(overrides)
    return DistScenarioSummary(**base)


RECOVERY = RecoverySummary(
    cause="oom", rank=1, step=5, restored_step=3, steps_replayed=2, detect_s=0.0421,
    resume_s=2.5, replayed_records=4, replayed_losses_equal=3, message="rank 1: " + XSS_SCRIPT,
)  # fmt: skip


def summary() -> DistTrainingSummary:
    ep = scenario(
        layout="ep2", ep=2, pp=1, shares=None, bubble=None, bubble_formula=0.0, ooms=1,
        oom_rate=0.25, attempts=2, recoveries=[RECOVERY],
    )  # fmt: skip
    return DistTrainingSummary(
        scenarios={PP: scenario(), EP: ep},
        peak_flops=PeakFlopsSummary(flops_per_s=1e11, source="measured", detail=None),
        link=LinkCalibration(
            all_to_all_bytes_per_s=30e6,
            all_to_all_bytes=1_000_000,
            pipeline_bytes_per_s=None,
            pipeline_message_bytes=None,
            all_reduce_bytes_per_s=2.5e8,
            all_reduce_bytes=5_000_000,
        ),
    )


def step(name: str, s: int, rank: int, **times: Any) -> StepRecord:
    start = s * 1_000 * MS + rank * MS
    return StepRecord(
        step=s, rank=rank, start_ns=start, end_ns=start + 500 * MS, tokens=256,
        scenario=name, stage=rank if name == PP else 0, attempt=0, **times,
    )  # fmt: skip


def step_records() -> list[StepRecord]:
    return [
        step(PP, 0, 0, compute_s=0.25, pipeline_s=0.2, all_reduce_s=0.05, wait_s=0.0),
        step(PP, 1, 0, compute_s=0.35, pipeline_s=0.1, all_reduce_s=0.05, wait_s=0.0),
        # rank 1: no all-to-all measured (None): counted as 0
        step(PP, 0, 1, compute_s=0.2, pipeline_s=0.01, all_reduce_s=0.05, wait_s=0.0),
        step(PP, 1, 1, compute_s=0.4, pipeline_s=0.03, all_reduce_s=0.05, wait_s=0.02),
        # a record without a time split (not the distributed trainer's): left out
        step(PP, 2, 1, compute_s=None, pipeline_s=9.0),
        step(EP, 0, 0, compute_s=0.3, all_to_all_s=0.1, all_reduce_s=0.0, wait_s=0.1),
        step(EP, 0, 1, compute_s=0.3, all_to_all_s=0.1, all_reduce_s=0.0, wait_s=0.1),
    ]


def steps_frame(records: list[StepRecord]) -> pd.DataFrame:
    return table_to_frame("steps", rows_to_table("steps", [r.to_dict() for r in records]))


def test_layout_frame_scales_shares_and_gives_the_bubble_formula():
    frame = layout_frame(summary()).set_index("scenario")
    pp, ep = frame.loc[PP], frame.loc[EP]
    assert (pp["layout"], pp["policy"], pp["skew"], pp["ranks"], pp["steps"]) == (
        "pp2", "keep-all", "calm", 2, 6,
    )  # fmt: skip
    assert pp["tokens/s"] == 2048.0 and pp["effective tokens/s"] == 1500.0
    assert pp["MFU %"] == 12.3
    assert pp["comm %"] == 40.0  # 25 + 10 + 5
    assert (pp["all-to-all %"], pp["send/recv %"], pp["all-reduce %"], pp["wait %"]) == (
        0.0, 25.0, 10.0, 5.0,
    )  # fmt: skip
    assert pp["bubble %"] == 30.0
    assert pp["bubble (p-1)/(m+p-1) %"] == 20.0  # p = 2, m = 4: 1/5
    assert pp["peak MiB by rank"] == "2.0, 3.5"
    assert pp["OOM rate %"] == 0.0
    # No pipeline, no shares: shown as missing, not as 0.
    assert pd.isna(ep["bubble %"]) and pd.isna(ep["comm %"]) and pd.isna(ep["wait %"])
    assert ep["bubble (p-1)/(m+p-1) %"] == 0.0 and ep["OOM rate %"] == 25.0


def test_rank_frame_lists_each_ranks_compute_and_the_spread():
    row = rank_frame(summary()).set_index("scenario").loc[PP]
    assert row["compute s p50 by rank"] == "0.250, 0.400"
    assert row["slowest rank"] == 1 and row["straggler spread %"] == 37.5


def test_recovery_frame_says_k_of_n_replayed_losses_were_bit_equal():
    frame = recovery_frame(summary())
    assert frame is not None and len(frame) == 1
    row = frame.iloc[0]
    assert (row["scenario"], row["cause"], row["rank"], row["at step"]) == (EP, "oom", 1, 5)
    assert (row["restored from"], row["steps replayed"]) == (3, 2)
    assert row["detect ms"] == pytest.approx(42.1) and row["resume s"] == 2.5
    assert row["replayed losses bit-equal"] == "3/4"
    no_failure = summary()
    no_failure.scenarios.pop(EP)
    assert recovery_frame(no_failure) is None


def test_link_frame_in_mb_per_s():
    frame = link_frame(summary()).set_index("link")
    assert frame.loc["all-to-all (token payload)", "MB/s"] == 30.0
    assert frame.loc["all-to-all (token payload)", "bytes"] == 1_000_000
    assert frame["MB/s"].isna().tolist() == [False, True, False]  # no pipeline ran
    assert frame.loc["all-reduce (gradients)", "MB/s"] == 250.0


def test_time_split_chart_stacks_each_kind_per_scenario_and_rank():
    fig = time_split_chart(steps_frame(step_records()))
    assert [t.name for t in fig.data] == ["compute", "all-to-all", "send/recv", "all-reduce",
                                          "wait"]  # fmt: skip
    assert fig.layout.barmode == "stack"
    escaped = html.escape(EP, quote=False)
    labels = [f"{PP} · rank 0", f"{PP} · rank 1", f"{escaped} · rank 0", f"{escaped} · rank 1"]
    for trace in fig.data:
        assert list(trace.x) == labels
    rank1 = {t.name: t.y[1] for t in fig.data}  # PP, rank 1: two records, not the third
    assert rank1 == pytest.approx(
        {"compute": 0.3, "all-to-all": 0.0, "send/recv": 0.02, "all-reduce": 0.05,
         "wait": 0.01}
    )  # fmt: skip
    assert list(fig.data[0].customdata) == [2, 2, 1, 1]  # records per bar


def test_time_split_chart_without_split_says_so():
    fig = time_split_chart(table_to_frame("steps", SCHEMAS["steps"].empty_table()))
    assert not fig.data and "no step records" in fig.layout.annotations[0].text


def write_run(root: Path, *, with_summary: bool = True) -> RunData:
    store = RunStore(root)
    with store.create("training-dist", spec_given={"name": "dist"}) as run:
        for record in step_records():
            run.append_step(record)
        if with_summary:
            run.write_summary(summary())
    return load_run(store, run.run_id)


def test_the_report_picks_the_dist_blocks_for_training_dist(tmp_path):
    suite = find_suite("training-dist")  # the registry is where the report finds them
    assert suite is not None and suite.report_blocks.load() is _dist_training_blocks
    run = write_run(tmp_path / "runs")
    assert isinstance(run.summary, DistTrainingSummary)  # round-tripped through JSON
    section = run_section(run)
    assert not any("No figures" in note for note in section.notes)
    tables = [b for b in section.blocks if isinstance(b, Table)]
    charts = [b for b in section.blocks if isinstance(b, Chart)]
    assert [c.drawn_by for c in charts] == [("dist_training",)]
    assert len(tables) == 4  # layouts, ranks, links, recoveries
    for table in tables:
        assert "measured on this host" in table.caption and "gloo on loopback" in table.caption
    assert "(p-1)/(m+p-1)" in tables[0].caption and "effective tokens/s:" in tables[0].caption
    assert "resume:" in tables[-1].caption
    assert list(tables[-1].frame["replayed losses bit-equal"]) == ["3/4"]


def test_the_page_shows_the_section_and_never_a_scenario_name_as_markup(tmp_path):
    page = build_report([write_run(tmp_path / "runs")], title="dist")
    assert XSS_SCRIPT not in page
    assert f"<td>{html.escape(EP)}</td>" in page  # the tables, as text
    plotly_escaped = html.escape(EP, quote=False).replace("/", "\\u002f")
    assert plotly_escaped in page  # the chart's labels, as Plotly text inside JSON
    assert "Time per step by rank (measured)" in page
    assert "replayed losses bit-equal" in page and "bubble (p-1)/(m+p-1) %" in page
    doc = inspect.cleandoc(moeperf.reports.figures.dist_training.__doc__ or "")
    assert html.escape(doc) in page  # the appendix says how the chart is drawn


def test_a_run_without_a_summary_still_gets_its_chart(tmp_path):
    run = write_run(tmp_path / "runs", with_summary=False)
    blocks = _dist_training_blocks(run)
    assert isinstance(blocks[0], Table) and "no summary" in blocks[0].caption
    assert [type(b) for b in blocks] == [Table, Chart]
    bare = RunData(
        manifest=run.manifest,
        requests=run.requests,
        steps=table_to_frame("steps", SCHEMAS["steps"].empty_table()),
        summary=None,
        server_metrics=[],
        samples=run.samples,
    )
    assert [type(b) for b in _dist_training_blocks(bare)] == [Table]
    assert "dist" in build_report([bare], title="dist")
