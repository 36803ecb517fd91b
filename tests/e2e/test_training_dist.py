"""The training-dist suite end to end through the CLI: the shipped spec (one process, EP=2,
PP=2, DP=2, and the SIGKILL drill on the EP=2 job) stored as one run of per-rank step
records, summarized with the job view, and reported as a page."""

from __future__ import annotations

import math

import pytest
from first_screen import assert_answer_on_first_screen

from moeperf.cli import main
from moeperf.collectors.dist_training_summary import DistTrainingSummary
from moeperf.collectors.store import RunStore

LAYOUTS = ["single", "ep2", "pp2", "dp2"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    runs = tmp_path_factory.mktemp("runs")
    code = main(["--runs-dir", str(runs), "run", "training-dist"])
    reader = RunStore(runs).open("latest")
    return code, reader, runs


@pytest.mark.slow
def test_every_layout_trains_the_same_losses(finished):
    code, reader, _ = finished
    assert code == 0
    summary = reader.summary()
    assert isinstance(summary, DistTrainingSummary)
    scenarios = {s.layout: s for s in summary.scenarios.values()}
    assert sorted(scenarios) == sorted(LAYOUTS)
    single = scenarios["single"]
    assert single.steps == 8 and single.loss_last is not None
    for layout in LAYOUTS:
        s = scenarios[layout]
        assert s.steps == 8 and s.loss_last is not None, layout
        # Same samples, same weights: the layouts differ only in the order of float sums.
        assert math.isclose(s.loss_last, single.loss_last, rel_tol=1e-5), layout


@pytest.mark.slow
def test_each_layout_spends_its_time_in_its_own_communication(finished):
    _, reader, _ = finished
    scenarios = {s.layout: s for s in reader.summary().scenarios.values()}
    shares = {name: s.shares for name, s in scenarios.items()}
    assert shares["single"].communication < 0.02  # one rank: nothing to send
    assert shares["ep2"].all_to_all > 0.01 and shares["ep2"].pipeline == 0
    assert shares["pp2"].pipeline > 0.01 and shares["pp2"].all_to_all == 0
    assert shares["dp2"].all_reduce > 0.01 and shares["dp2"].all_to_all == 0
    for s in scenarios.values():
        total = s.shares.compute + s.shares.communication
        assert total == pytest.approx(1.0, abs=0.02)
    # One micro-batch stream per stage here (m = 4): (p - 1) / (m + p - 1) = 1 / 5.
    assert scenarios["pp2"].bubble_formula == pytest.approx(0.2)
    assert scenarios["pp2"].bubble is not None and scenarios["pp2"].bubble > 0
    assert scenarios["ep2"].bubble is None and scenarios["ep2"].bubble_formula == 0
    assert [len(s.peak_memory_bytes_by_rank) for s in scenarios.values()] == [1, 2, 2, 2]
    link = reader.summary().link
    assert link.all_to_all_bytes_per_s and link.pipeline_bytes_per_s
    assert link.all_reduce_bytes_per_s


@pytest.mark.slow
def test_the_killed_rank_is_recovered_with_the_loss_continuous(finished):
    _, reader, _ = finished
    ep2 = next(s for s in reader.summary().scenarios.values() if s.layout == "ep2")
    assert ep2.attempts == 2 and ep2.steps == 8
    (recovery,) = ep2.recoveries
    assert (recovery.cause, recovery.rank) == ("killed", 1)
    # Killed once it reported step 4; the newest checkpoint (one every 3 steps) is step 3.
    assert recovery.restored_step == 3 and recovery.steps_replayed == 2
    assert 0 <= recovery.detect_s < 5 and recovery.resume_s is not None
    assert recovery.resume_s > 0
    assert recovery.replayed_records == 4  # steps 3 and 4 on both ranks
    assert recovery.replayed_losses_equal == 4  # bit for bit
    steps = reader.steps()
    ep2_rows = steps[steps["scenario"] == "ep2/keep-all/calm"]
    assert sorted(ep2_rows["attempt"].unique().tolist()) == [0, 1]
    assert len(ep2_rows) == 2 * 8 + 4  # every step on both ranks, the replays again


@pytest.mark.slow
def test_records_carry_ranks_and_the_report_renders(finished, capsys, tmp_path):
    _, reader, runs = finished
    steps = reader.steps()
    for name, ranks in (("single", 1), ("ep2", 2), ("pp2", 2), ("dp2", 2)):
        rows = steps[steps["scenario"] == f"{name}/keep-all/calm"]
        assert sorted(rows["rank"].unique().tolist()) == list(range(ranks))
    pp2 = steps[steps["scenario"] == "pp2/keep-all/calm"]
    assert sorted(pp2["stage"].unique().tolist()) == [0, 1]
    assert main(["--runs-dir", str(runs), "report", "latest"]) == 0
    page = (reader.directory / "report.html").read_text()
    assert_answer_on_first_screen(reader.directory / "report.html", "training-dist", tmp_path)
    assert "ep2/keep-all/calm" in page


@pytest.mark.slow
def test_the_sampler_watched_every_job_with_its_ranks(finished):
    _, reader, _ = finished
    summary = reader.summary()
    steps = reader.steps()
    rss_peak = {}
    for name, s in summary.scenarios.items():
        figures = s.accelerator
        assert figures is not None, name
        # Over the job's steps: the first rank's first start to the last rank's last end
        # (the ep2 drill's replays are the steps' last executions, so they end it).
        mine = steps[steps["scenario"] == name]
        assert figures.start_ns == int(mine["start_ns"].min())
        assert figures.end_ns == int(mine["end_ns"].max())
        assert figures.steps == s.steps == 8
        (process,) = [d for d in figures.devices if d.source == "process"]
        assert process.rss_peak_bytes is not None and process.cpu_mean_ratio is not None
        rss_peak[s.layout] = process.rss_peak_bytes
    # The ranks are children of the harness, so the tree holds them: a job of two ranks
    # (each a Python process with torch) weighs more than one of one.
    for layout in ("ep2", "pp2", "dp2"):
        assert rss_peak[layout] > rss_peak["single"] + 150 * 2**20, rss_peak
    telemetry = summary.telemetry
    assert telemetry is not None and telemetry.cost is not None and telemetry.cost.reads > 0
    assert telemetry.run is not None and telemetry.run.steps == 4 * 8
    assert {s.scenario for s in reader.accelerator_samples()} >= set(summary.scenarios)
