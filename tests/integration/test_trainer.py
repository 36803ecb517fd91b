"""The reference trainer: OOM at the budget and recovery from a checkpoint, policies that
change memory but not gradients, and the adaptive policy under a routing spike."""

from __future__ import annotations

import json
import time
from dataclasses import replace

import pytest
import torch

from moeperf.targets.model.config import MoEConfig
from moeperf.targets.model.model import MoETransformer
from moeperf.targets.training import memory
from moeperf.targets.training.policies import (
    AdaptivePolicy,
    CostModel,
    FullRecompute,
    KeepAll,
    OpCost,
    SelectiveRecompute,
)
from moeperf.targets.training.setup import TrainerConfig, TrainingConfigError, build
from moeperf.targets.training.trainer import StepResult, Trainer

pytestmark = pytest.mark.slow

# Expert activations big next to everything else, so routing moves memory.
TINY = MoEConfig(
    vocab_size=4096, hidden_size=64, expert_hidden_size=512, num_layers=2, num_heads=4,
    num_kv_heads=2, num_experts=8, top_k=2, max_position=256, mtp_depth=0,
)  # fmt: skip
SPIKE_SAMPLE = 7  # step 3, micro-batch 1 with 2 micro-batches per step


@pytest.fixture(scope="module")
def replay_file(tmp_path_factory):
    """Balanced routing, except one micro-batch sending every token to experts 0 and 1."""
    path = tmp_path_factory.mktemp("replay") / "routing.jsonl"
    calm = {"tokens_per_expert": [[32] * 8] * TINY.num_layers}
    spike = {"tokens_per_expert": [[128, 128, 0, 0, 0, 0, 0, 0]] * TINY.num_layers}
    lines = [spike if m == SPIKE_SAMPLE else calm for m in range(16)]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def config(tmp_path, replay_file, **changes) -> TrainerConfig:
    base = TrainerConfig(
        model=TINY, init_from=None, mtp=False, seq_len=64, micro_batch_size=2,
        microbatches=2, steps=6, lr=1e-3, pipeline_stages=2, stage=0, expert_parallel=4,
        skew="replay", replay_path=str(replay_file), checkpoint_every=2,
        checkpoint_dir=str(tmp_path / "checkpoints"), threads=1,
    )  # fmt: skip
    # One thread: the matmuls are tiny, and on a busy host (two xdist workers on two cores)
    # a second torch thread only spins at barriers (this file: 45 s with two threads, 9 s with
    # one, beside one busy process).
    return replace(base, **changes)


def train(cfg: TrainerConfig) -> list[StepResult]:
    results: list[StepResult] = []
    Trainer(build(cfg)).run(results.append)
    return results


@pytest.fixture(scope="module")
def unlimited(tmp_path_factory, replay_file):
    """Keep-all without a budget: the peaks the budget is placed between."""
    return train(config(tmp_path_factory.mktemp("unlimited"), replay_file))


def test_the_spike_raises_the_peak(unlimited):
    peaks = {r.step: r.peak_memory_bytes for r in unlimited}
    calm = max(p for step, p in peaks.items() if step != 3)
    assert peaks[3] > calm * 1.02


def budget_between_the_peaks(unlimited: list[StepResult]) -> int:
    peaks = {r.step: r.peak_memory_bytes for r in unlimited}
    calm = max(p for step, p in peaks.items() if step != 3)
    return (calm + peaks[3]) // 2


class JumpingClock:
    """time.monotonic_ns, plus whatever the test adds to ``offset_ns`` (other jobs' steps)."""

    def __init__(self) -> None:
        self.offset_ns = 0

    def __call__(self) -> int:
        return time.monotonic_ns() + self.offset_ns


WAIT_NS = 1_000 * 10**9  # 1,000 s of other jobs' steps between two of this one's


@pytest.fixture(scope="module")
def budgeted(tmp_path_factory, replay_file, unlimited) -> tuple[int, list[StepResult]]:
    """Keep-all under a budget between the calm and the spiky peak, stepped in turn with
    other jobs (interleaved scenarios): the clock jumps WAIT_NS while the trainer sits
    suspended between its steps. One run for the OOM-recovery facts and the lost-time ones
    (they read different fields of it); the real clock still times the steps themselves."""
    budget = budget_between_the_peaks(unlimited)
    cfg = config(tmp_path_factory.mktemp("budgeted"), replay_file, budget_bytes=budget)
    clock = JumpingClock()
    results = []
    for result in Trainer(build(cfg), clock).steps():
        results.append(result)
        clock.offset_ns += WAIT_NS
    return budget, results


def test_oom_at_the_budget_restarts_from_the_checkpoint_and_continues(budgeted, unlimited):
    budget, results = budgeted
    events = [e for r in results for e in r.events]
    kinds = [e["kind"] for e in events]
    assert kinds.count("oom") == 1 and kinds.count("restart") == 1
    oom = next(e for e in events if e["kind"] == "oom")
    restart = next(e for e in events if e["kind"] == "restart")
    assert oom["step"] == 3 and oom["sample"] == SPIKE_SAMPLE
    assert "budget" in oom["message"]
    assert restart["from_step"] == 2 and restart["lost_s"] > 0 and restart["restore_s"] > 0
    # Steps 0-2 ran, the OOM in step 3 lost step 2 (after the step-2 checkpoint), which is
    # replayed on the same data from the same weights: the same loss, to the bit.
    steps = [r.step for r in results]
    assert steps == [0, 1, 2, 2, 3, 4, 5]
    first, replayed = results[2], results[3]
    assert replayed.loss == first.loss and replayed.samples == first.samples
    assert any(e["kind"] == "replay" for e in replayed.events)
    # The failed micro-batch is skipped; every completed step stayed under the budget.
    assert SPIKE_SAMPLE not in results[4].samples
    assert all(r.peak_memory_bytes <= budget for r in results)
    # And up to the OOM it matched the unlimited run exactly.
    assert [r.loss for r in results[:3]] == [r.loss for r in unlimited[:3]]


def test_the_work_an_oom_loses_is_the_jobs_own_not_the_time_between_its_steps(budgeted):
    """Stepped in turn with other jobs (interleaved scenarios), a trainer sits suspended
    between its steps; an OOM loses the work since its last checkpoint, not that wait."""
    _, results = budgeted
    restart = next(e for r in results for e in r.events if e["kind"] == "restart")
    assert 0 < restart["lost_s"] < WAIT_NS / 1e9
    assert all(0 < r.end_ns - r.start_ns < WAIT_NS for r in results)


def test_full_recompute_and_adaptive_fit_where_keep_all_does_not(tmp_path, replay_file, unlimited):
    budget = budget_between_the_peaks(unlimited)
    for policy in ("full-recompute", "adaptive"):
        results = train(config(tmp_path / policy, replay_file, budget_bytes=budget, policy=policy))
        assert [r.step for r in results] == list(range(6)), policy
        assert not [e for r in results for e in r.events if e["kind"] == "oom"], policy
        assert max(r.peak_memory_bytes for r in results) <= budget, policy
        if policy == "adaptive":
            acted = [d for r in results for d in r.policy_decisions if d["ops"]]
            assert acted, "the adaptive policy never acted under the spike"


def _gradients(model: MoETransformer, runner, budget, idx, targets) -> list[torch.Tensor]:
    model.zero_grad(set_to_none=True)
    model.set_runner(runner)
    with budget.track():
        model(idx, targets).loss.backward()
    return [p.grad.clone() for p in model.parameters() if p.grad is not None]


def test_recompute_and_offload_give_the_gradients_of_keep_all():
    torch.manual_seed(0)
    model = MoETransformer(replace(TINY, vocab_size=512, mtp_depth=1))
    idx = torch.randint(0, 512, (2, 32))
    targets = torch.randint(0, 512, (2, 32))
    budget = memory.AccountedBudget(None)
    expected = _gradients(model, KeepAll(), budget, idx, targets)
    cost = CostModel(OpCost(100.0, 1e-6), OpCost(100.0, 1e-6), 0, 1e-12)
    runners = {
        "full-recompute": FullRecompute(),
        "selective": SelectiveRecompute(),
        # A margin of all but nothing: the adaptive policy has to act on every operator.
        "adaptive-offload": AdaptivePolicy(budget, cost, model.num_slots, 64, 2, margin=1.0),
        "adaptive-recompute": AdaptivePolicy(
            budget,
            replace(cost, offload_seconds_per_byte=1.0),
            model.num_slots,
            64,
            2,
            margin=1.0,
        ),
    }
    for name, runner in runners.items():
        if isinstance(runner, AdaptivePolicy):
            runner.begin_microbatch()
        got = _gradients(model, runner, budget, idx, targets)
        assert len(got) == len(expected), name
        for a, b in zip(got, expected, strict=True):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5, msg=name)
        if isinstance(runner, AdaptivePolicy):
            decisions, _ = runner.take_decisions()
            actions = {op["action"] for d in decisions for op in d["ops"]}
            assert actions == {name.split("-")[1]}, (name, actions)


def test_bad_configurations_are_refused(tmp_path, replay_file):
    with pytest.raises(TrainingConfigError, match=r"unknown policy 'fastest'.*keep-all"):
        build(config(tmp_path, replay_file, policy="fastest"))
    with pytest.raises(TrainingConfigError, match="smaller than the weights"):
        build(config(tmp_path, replay_file, budget_bytes=1000))
    with pytest.raises(ValueError, match=r"nowhere\.jsonl"):
        build(config(tmp_path, replay_file, replay_path=str(tmp_path / "nowhere.jsonl")))
