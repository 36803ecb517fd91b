"""The training suite's per-scenario figures, from hand-made step records: an OOM at step 2
after a checkpoint at step 0, so steps 0 and 1 are replayed."""

from __future__ import annotations

import pytest
from rich.console import Console

from moeperf.collectors.records import StepRecord
from moeperf.collectors.training_summary import (
    BudgetCalibration,
    PeakFlopsSummary,
    ScenarioOutcome,
    summarize_scenario,
    summarize_training,
)
from moeperf.reports.terminal.training_tables import training_tables

S = 1_000_000_000


def step(n: int, start_s: float, time_s: float, peak: int, events=(), mfu=0.3) -> StepRecord:
    return StepRecord(
        step=n, rank=0, start_ns=int(start_s * S), end_ns=int((start_s + time_s) * S),
        tokens=100, scenario="keep-all/spiky", mfu=mfu, peak_memory_bytes=peak,
        events=list(events),
    )  # fmt: skip


def outcome() -> ScenarioOutcome:
    records = [
        step(0, 0, 1, 10, [{"kind": "checkpoint", "step": 0, "write_s": 0.5}]),
        step(1, 1, 1, 20),
        # step 2 hit an OOM: recorded on the next successful step, the replay of step 0
        step(0, 4, 1, 30, [
            {"kind": "oom", "step": 2, "sample": 9, "message": "out of memory"},
            {"kind": "skip", "sample": 9},
            {"kind": "restart", "from_step": 0, "lost_s": 2.5, "restore_s": 0.5},
            {"kind": "replay", "step": 0},
        ], mfu=0.1),
        step(1, 5, 1, 40, [{"kind": "replay", "step": 1}]),
        step(2, 6, 2, 50, mfu=0.2),
    ]  # fmt: skip
    return ScenarioOutcome(
        "keep-all/spiky", "keep-all", "spiky", "", 1000, setup_s=3.0, wall_s=10.0,
        records=records, decide_s=0.25, skipped_samples=[9],
    )  # fmt: skip


def test_scenario_figures():
    e = summarize_scenario(outcome())
    assert e.steps == 3  # replays count once
    assert e.replayed_steps == 2
    assert e.ooms == 1 and e.restarts == 1
    assert e.step_attempts == 6  # five records and the step the OOM ended
    assert e.oom_rate == pytest.approx(1 / 6)
    assert e.time_lost_s == pytest.approx(3.0)  # lost work + reload
    assert e.checkpoint_write_s == pytest.approx(0.5)
    assert e.tokens == 300
    assert e.effective_tokens_per_s == pytest.approx(300 / 10.0)
    assert e.tokens_per_s == pytest.approx(500 / 6.0)  # every record, over step time
    assert e.mfu_p50 == pytest.approx(0.3)
    assert e.peak_memory_bytes.p50 == 30 and e.peak_memory_bytes.max == 50
    assert e.peak_memory_bytes.p99 == pytest.approx(49.6)
    assert e.decide_s == 0.25 and list(e.skipped_samples) == [9]


def test_an_empty_scenario_says_not_measured():
    e = summarize_scenario(ScenarioOutcome("a/b", "a", "b", "", None))
    assert e.steps == 0 and e.oom_rate is None and e.mfu_p50 is None
    assert e.effective_tokens_per_s is None and e.peak_memory_bytes.max is None


def test_tables_render_every_scenario():
    peak = PeakFlopsSummary(flops_per_s=1e11, source="measured", detail=None)
    budgets = {
        "": BudgetCalibration(
            budget_bytes=1010,
            ratio=1.01,
            calibration_peak_bytes=1000,
            calibration_step_peaks_bytes=(990, 1000),
            calibration="keep-all, calm skew, no budget",
        )
    }
    empty = ScenarioOutcome("adaptive/calm", "adaptive", "calm", "", None)
    summary = summarize_training("mfu", [outcome(), empty], peak, budgets)
    console = Console(width=250, record=True)
    tables = training_tables(summary)
    assert len(tables) == 2  # MFU first for an MFU run
    for table in tables:
        console.print(table)
    text = console.export_text()
    assert "keep-all" in text and "adaptive" in text
    assert "1 / 6" in text and "16.7%" in text and "n/a" in text
    assert "100.0 GFLOP/s, measured" in text
    assert "1.01 x" in text
