"""A deployment sweep's figures on hand-built request records: levels, capacity under the
SLO, the Pareto front, the recommendation and the comparisons; its grid, order and record
in summary.json."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from moeperf.collectors.deploy_sweep_records import DeployArm, DeploySweepSummary
from moeperf.collectors.deploy_sweep_summary import LevelRun, arm_capacity, capacity, with_figures
from moeperf.collectors.records import RequestRecord
from moeperf.collectors.serving_records import ScenarioSummary, ServingSummary
from moeperf.collectors.summary import summarize_requests
from moeperf.collectors.summary_json import summary_from_json, summary_to_json
from moeperf.collectors.tables import records_frame
from moeperf.reports.gate import gate
from moeperf.suites.serving.capacity.judge import judge_probe
from moeperf.suites.serving.deploy_sweep.arms import interleaved, scenario_of
from moeperf.suites.serving.mode_spec import DeploySweepSpec

MS = 1_000_000
TOKENS = 8


def records(scenario: str, streams: int, gap_ms: float, count: int = 40) -> list[RequestRecord]:
    """``count`` ok requests of ``streams`` closed-loop streams: 8 tokens ``gap_ms`` apart,
    the first after one gap; each stream sends its next request when one ends."""
    out = []
    duration = int(gap_ms * TOKENS * MS)
    for i in range(count):
        send = (i // streams) * duration
        chunks = [send + int((k + 1) * gap_ms * MS) for k in range(TOKENS)]
        out.append(
            RequestRecord(
                request_id=f"{scenario}-{i}", scenario=scenario, phase="measure", worker=0,
                intended_send_ns=send, send_ns=send, done_ns=chunks[-1], status="ok",
                chunk_ns=chunks, chunk_tokens=[1] * TOKENS, first_token_ns=chunks[0],
                last_token_ns=chunks[-1], output_tokens=TOKENS,
            )
        )  # fmt: skip
    return out


# Two arms, one twice as fast per token; each slows with its streams. The SLO is TPOT p99
# <= 12 ms: the fast arm holds it at 1 and 4 streams, the slow one at 1 stream only.
GAPS_MS = {("fast", 1): 4.0, ("fast", 4): 6.0, ("slow", 1): 8.0, ("slow", 4): 16.0}
CRITERIA = DeploySweepSpec(grid={"threads": [1, 2]}, tpot_p99_s=0.012)


def swept() -> tuple[DeploySweepSummary, ServingSummary]:
    arms = (DeployArm(0, "slow", {"threads": 2}, 1), DeployArm(1, "fast", {"threads": 1}, 1))
    runs, all_records = [], []
    for arm in arms:
        for streams in (1, 4):
            scenario = scenario_of(arm.label, streams, 1, 1)
            runs.append(LevelRun(arm.index, streams, scenario))
            all_records += records(scenario, streams, GAPS_MS[(arm.label, streams)])
    frame = records_frame(all_records)
    serving = summarize_requests(frame)
    shell = DeploySweepSummary("reference", "TPOT p99 <= 0.012 s", 1, (0, 1), arms)

    return with_figures(
        shell, runs, frame, serving.scenarios, lambda e: _judged(e, CRITERIA)
    ), serving


def test_levels_capacity_and_the_recommendation():
    sweep, _ = swept()
    slow, fast = sweep.arms
    assert [lv.slo_held for lv in fast.levels] == [True, True]
    assert [lv.slo_held for lv in slow.levels] == [True, False]
    assert (fast.capacity_held, fast.capacity_failed) == (4, None)
    assert (slow.capacity_held, slow.capacity_failed) == (1, 4)
    # TPOT: the gap between tokens; tok/s per user its inverse.
    assert fast.levels[0].tpot_p50_s == pytest.approx(0.004)
    assert fast.levels[0].tok_s_per_user == pytest.approx(250.0)
    rec = sweep.recommendation
    assert rec is not None and (rec.arm, rec.streams) == (1, 4)
    assert rec.why.startswith("fast holds the SLO up to 4 streams (the highest level run)")
    assert "next: slow" in rec.why


def test_the_slower_arm_is_significantly_worse_at_the_recommended_level():
    sweep, _ = swept()
    (versus,) = sweep.comparisons
    assert versus.arm == 0 and versus.streams == 4
    # Per request: 8 tokens in 8 x 16 ms against 8 x 6 ms.
    assert versus.ratio == pytest.approx(6 / 16)
    assert versus.ci_high is not None and versus.ci_high < 1
    assert versus.outcome == "worse"


def test_the_front_holds_the_points_no_other_beats_on_both_axes():
    sweep, _ = swept()
    front = {(p.arm, p.streams) for p in sweep.pareto if p.on_front}
    # fast at 1 stream is the fastest per user; fast at 4 the most per accelerator; both
    # of the slow arm's points are beaten by fast's on both axes.
    assert front == {(1, 1), (1, 4)}


def test_per_accelerator_figures_divide_by_the_arms_accelerators():
    sweep, serving = swept()
    fast = sweep.arms[1]
    level = fast.levels[1]
    assert level.output_tok_s == serving.scenarios[level.scenarios[0]].output_throughput_tok_s
    assert level.output_tok_s_per_accelerator == level.output_tok_s
    # The fast arm on two accelerators: half as much per accelerator, and the slow arm's
    # per-request rate per accelerator is then 6/16 x 2 of the fast one's.
    arms = (sweep.arms[0], dataclasses.replace(fast, accelerators=2, levels=()))
    again = refigured(dataclasses.replace(sweep, arms=arms), serving)
    two = again.arms[1].levels[1]
    assert level.output_tok_s is not None
    assert two.output_tok_s_per_accelerator == pytest.approx(level.output_tok_s / 2)
    assert again.recommendation is not None and again.recommendation.arm == 1
    (versus,) = again.comparisons
    assert versus.arm == 0 and versus.ratio == pytest.approx(2 * 6 / 16)


def refigured(sweep: DeploySweepSummary, serving: ServingSummary) -> DeploySweepSummary:
    """``sweep``'s figures again from the same records."""
    runs = [LevelRun(arm.index, streams, scenario_of(arm.label, streams, 1, 1))
            for arm in sweep.arms for streams in (1, 4)]  # fmt: skip
    frame = _frame(sweep.arms)
    bare = tuple(dataclasses.replace(a, levels=()) for a in sweep.arms)
    return with_figures(dataclasses.replace(sweep, arms=bare), runs, frame, serving.scenarios,
                        lambda entry: _judged(entry, CRITERIA))  # fmt: skip


def _frame(arms: tuple[DeployArm, ...]) -> pd.DataFrame:
    """The request records of every arm at 1 and 4 streams, as ``swept`` made them."""
    made = []
    for arm in arms:
        for streams in (1, 4):
            gap_ms = GAPS_MS[(arm.label, streams)]
            made += records(scenario_of(arm.label, streams, 1, 1), streams, gap_ms)
    return records_frame(made)


def _judged(entry: ScenarioSummary, criteria: DeploySweepSpec) -> tuple[bool | None, str]:
    verdict = judge_probe(entry, criteria)
    return verdict.passed, verdict.reason


def test_no_arm_holding_the_slo_has_no_recommendation():
    sweep, serving = swept()
    strict = DeploySweepSpec(grid={"threads": [1]}, tpot_p99_s=0.001)
    runs = [LevelRun(arm.index, lv.streams, lv.scenarios[0]) for arm in sweep.arms
            for lv in sweep.arms[arm.index].levels]  # fmt: skip
    frame = _frame(sweep.arms)
    again = with_figures(sweep, runs, frame, serving.scenarios, lambda e: _judged(e, strict))
    assert [arm.capacity_held for arm in again.arms] == [None, None]
    assert again.recommendation is not None and again.recommendation.arm is None
    assert "no arm held the SLO at its lowest level" in again.recommendation.why
    assert again.comparisons == ()


def test_capacity_stops_at_the_first_level_not_held_or_not_judged():
    sweep, _ = swept()
    held, failed, unjudged = (
        dataclasses.replace(sweep.arms[1].levels[0], streams=s, slo_held=h)
        for s, h in ((1, True), (2, False), (4, None))
    )
    assert capacity([held, failed]) == (1, 2)
    assert capacity([held, unjudged]) == (1, None)
    # A failure at the lowest level: below it; a later level that held does not count.
    lowest_failed = dataclasses.replace(held, slo_held=False)
    later_held = dataclasses.replace(failed, slo_held=True)
    assert capacity([later_held, lowest_failed]) == (None, 1)


def test_the_sweep_reads_back_from_summary_json():
    sweep, serving = swept()
    summary = dataclasses.replace(serving, deploy_sweep=sweep)
    assert summary_from_json(summary_to_json(summary), "summary.json") == summary


def test_the_grid_and_the_interleaved_order():
    spec = DeploySweepSpec(grid={"threads": [1, 2], "mtp_tokens": [0, 1, 2]}, ttft_p99_s=1)
    arms = spec.arm_knobs()
    assert len(arms) == 6 and arms[0] == {"threads": 1, "mtp_tokens": 0}
    assert arms[-1] == {"threads": 2, "mtp_tokens": 2}
    zipped = DeploySweepSpec(grid={"threads": [1, 2], "mtp_tokens": [0, 2]}, zip=True,
                             accelerators="threads", ttft_p99_s=1)  # fmt: skip
    assert zipped.arm_knobs() == [{"threads": 1, "mtp_tokens": 0}, {"threads": 2, "mtp_tokens": 2}]
    assert [zipped.accelerators_of(k) for k in zipped.arm_knobs()] == [1, 2]
    assert interleaved(3, 3) == [(0, 1), (1, 1), (2, 1), (2, 2), (1, 2), (0, 2),
                                 (0, 3), (1, 3), (2, 3)]  # fmt: skip


def test_the_gate_judges_each_arms_capacity_by_the_capacity_rule():
    baseline, _ = swept()
    slow, fast = baseline.arms
    # The candidate's fast arm fails at 4 streams, which the baseline's held; its slow arm
    # measured as before; a third arm of the baseline never ran in the candidate.
    third = dataclasses.replace(slow, index=2, label="third")
    worse = dataclasses.replace(fast, capacity_held=1, capacity_failed=4)
    arms = {
        f"{b.label} capacity": (arm_capacity(b, baseline.slo), arm_capacity(c, baseline.slo))
        for b, c in ((slow, slow), (fast, worse), (third, dataclasses.replace(third, levels=())))
    }
    assert arms["third capacity"][1] is None  # an arm that ran no level has no capacity
    base_fast = arms["fast capacity"][0]
    assert base_fast is not None and base_fast.status == "above_max"  # every level held
    assert [p.passed for p in base_fast.probes] == [True, True]
    result = gate([], [], arms=arms)
    outcomes = {v.key: v.outcome for v in result.verdicts}
    assert outcomes == {
        "slow capacity streams": "no change",
        "fast capacity streams": "regression",
        "third capacity streams": "missing from candidate",
    }
    regression = next(v for v in result.verdicts if v.key == "fast capacity streams")
    assert regression.reason.startswith(
        "the candidate failed at 4 streams, a level the baseline held (up to 4)"
    )
    assert result.status == "fail"
