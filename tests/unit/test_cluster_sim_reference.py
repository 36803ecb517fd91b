"""The cluster simulator configured as the reference trainer (targets.cluster_sim.reference):
its recovery is the trainer's (a crashed step's samples skipped, the last checkpoint
restored, the steps since replayed), its fitted efficiency comes back from the times it
predicts, and its memory and time move the way the policies and the skew move them.

Whether its figures are the trainer's measured ones is tests/e2e/test_simulator_check.py."""

from __future__ import annotations

import dataclasses

import pytest

from moeperf.targets.cluster_sim.reference import (
    ReferenceCalibration,
    fit_efficiency,
    predict,
    step_flops,
)
from moeperf.targets.model.config import MoEConfig
from moeperf.targets.training.setup import TrainerConfig
from moeperf.targets.training.skew import CalmProfile, NoSkew, SpikyProfile

# The shipped training-oom spec's trainer (suites/specs/training-oom.toml).
CFG = TrainerConfig(model=MoEConfig(expert_hidden_size=1024, mtp_depth=0), init_from=None,
                    mtp=False, seq_len=256, micro_batch_size=4, microbatches=4, steps=8,
                    pipeline_stages=4, stage=0, expert_parallel=4, checkpoint_every=4,
                    skew_seed=0, max_restarts=8)  # fmt: skip
CAL = ReferenceCalibration(peak_flops_per_s=1.0e11, efficiency=0.4, static_bytes=500 * 2**20,
                           working_set_bytes=60 * 2**20, host_copy_s_per_byte=1e-10)  # fmt: skip
CALM, SPIKY = CalmProfile(0), SpikyProfile(0)


def _cfg(policy: str) -> TrainerConfig:
    return dataclasses.replace(CFG, policy=policy)


def _peaks(policy: str, profile) -> list[int]:
    return [s.peak_bytes for s in predict(_cfg(policy), CAL, profile, None).steps]


def test_keep_all_without_a_budget_runs_every_step_once_at_the_fitted_rate():
    prediction = predict(CFG, CAL, CALM, None)
    assert not prediction.stopped and prediction.ooms == 0
    assert [s.step for s in prediction.steps] == list(range(CFG.steps))
    assert not any(s.replay for s in prediction.steps)
    expected_s = step_flops(CFG) / (CAL.peak_flops_per_s * CAL.efficiency)
    assert all(s.time_s == pytest.approx(expected_s) for s in prediction.steps)
    times = [s.time_s for s in prediction.steps]
    assert fit_efficiency(CFG, times, CAL.peak_flops_per_s) == pytest.approx(CAL.efficiency)


def test_more_skew_never_lowers_a_steps_peak():
    # No budget: the same samples in every step, so step i of each profile is comparable.
    balanced, calm, spiky = (_peaks("keep-all", p) for p in (NoSkew(), CALM, SPIKY))
    assert all(b <= c <= s for b, c, s in zip(balanced, calm, spiky, strict=True))
    assert max(spiky) > max(calm)  # seed 0 spikes sample 5: step 1


def test_the_policies_trade_memory_for_time():
    peak = {p: max(_peaks(p, SPIKY)) for p in ("keep-all", "selective", "full-recompute")}
    assert peak["full-recompute"] < peak["selective"] < peak["keep-all"]
    time_s = {
        p: predict(_cfg(p), CAL, SPIKY, None).steps[0].time_s
        for p in ("keep-all", "selective", "full-recompute")
    }
    assert time_s["keep-all"] < time_s["selective"] < time_s["full-recompute"]


def _between_calm_and_spiky(policy: str = "keep-all") -> int:
    calm, spiky = max(_peaks(policy, CALM)), max(_peaks(policy, SPIKY))
    assert calm < spiky
    return (calm + spiky) // 2


def test_an_oom_skips_its_samples_restores_the_checkpoint_and_replays():
    budget = _between_calm_and_spiky()
    prediction = predict(CFG, CAL, SPIKY, budget)
    assert not prediction.stopped and prediction.ooms >= 1
    assert all(s.oom == (s.peak_bytes > budget) for s in prediction.steps)
    done = prediction.completed
    # Every step number is completed, the first time not as a replay.
    assert sorted({s.step for s in done}) == list(range(CFG.steps))
    assert len([s for s in done if not s.replay]) == CFG.steps
    for i, attempt in enumerate(prediction.steps):
        if attempt.oom:
            # A crashed step's samples are never trained again...
            later = {j for s in prediction.steps[i + 1 :] for j in s.samples}
            assert later.isdisjoint(attempt.samples)
            # ... and the job resumes at the last checkpoint at or before it.
            resumed = prediction.steps[i + 1].step
            assert resumed % CFG.checkpoint_every == 0 and resumed <= attempt.step
            assert any(SPIKY.is_spike(j) for j in attempt.samples)
    assert not any(SPIKY.is_spike(j) for s in done for j in s.samples)


def test_calm_steps_under_the_same_budget_never_oom():
    prediction = predict(CFG, CAL, CALM, _between_calm_and_spiky())
    assert prediction.ooms == 0 and len(prediction.completed) == CFG.steps


def test_the_adaptive_policy_fits_the_spikes_the_budget_crashes_keep_all_on():
    budget = _between_calm_and_spiky()
    adaptive = predict(_cfg("adaptive"), CAL, SPIKY, budget)
    assert adaptive.ooms == 0 and len(adaptive.completed) == CFG.steps
    assert max(s.peak_bytes for s in adaptive.steps) <= budget
    # It pays for that in time: more than keeping all, less than recomputing everything.
    keep_s = step_flops(CFG) / (CAL.peak_flops_per_s * CAL.efficiency)
    full_s = predict(_cfg("full-recompute"), CAL, SPIKY, None).steps[0].time_s
    assert all(keep_s <= s.time_s < full_s for s in adaptive.steps)
    assert max(s.time_s for s in adaptive.steps) > keep_s
    # With memory to spare it keeps everything, at keep-all's time.
    roomy = predict(_cfg("adaptive"), CAL, SPIKY, 2 * budget)
    assert all(s.time_s == pytest.approx(keep_s) for s in roomy.steps)


def test_a_budget_below_every_step_stops_after_max_restarts():
    budget = min(_peaks("keep-all", NoSkew())) - 1
    prediction = predict(CFG, CAL, CALM, budget)
    assert prediction.stopped and prediction.ooms == CFG.max_restarts + 1
    assert prediction.completed == []
