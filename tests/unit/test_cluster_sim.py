"""The cluster simulator's invariants: FLOPs as the trainer counts them, activation bytes as
the trainer's ledger counts them, tokens conserved in dispatch, the 1F1B bubble, memory never
negative, no OOM without cause, more skew never fewer OOMs, and layouts that do not divide."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
import torch

from moeperf.targets.cluster_sim import routing
from moeperf.targets.cluster_sim.activations import PolicyName, reference_layout
from moeperf.targets.cluster_sim.config import (
    Cluster,
    ClusterSimConfigError,
    Parallel,
    SimConfig,
    SimModel,
)
from moeperf.targets.cluster_sim.flops import training_flops_per_token
from moeperf.targets.cluster_sim.pipeline import (
    bubble_fraction,
    peak_saved_bytes,
    simulate_1f1b,
    stage_orders,
)
from moeperf.targets.cluster_sim.simulate import JobSpec, simulate
from moeperf.targets.model.config import MoEConfig
from moeperf.targets.model.model import MoETransformer
from moeperf.targets.model.op_runner import DIRECT, OpRunner
from moeperf.targets.training import flops
from moeperf.targets.training.memory import AccountedBudget
from moeperf.targets.training.policies import FullRecompute, KeepAll, SelectiveRecompute

SMALL = SimModel(num_layers=8, hidden_size=1024, num_heads=16, num_kv_heads=4, head_dim=64,
                 num_experts=16, top_k=2, expert_hidden_size=2048, vocab_size=32000,
                 seq_len=2048)  # fmt: skip
GPU = Cluster(devices=64, peak_flops_per_s=989e12, memory_bytes=80e9, hbm_bytes_per_s=3.35e12,
              scale_up_domain=8, scale_up_bytes_per_s=450e9, scale_out_bytes_per_s=50e9,
              host_link_bytes_per_s=55e9)  # fmt: skip


def _config(memory_bytes: float = 80e9, **parallel: Any) -> SimConfig:
    layout = dataclasses.replace(Parallel(pipeline=4, expert=8), **parallel)
    return SimConfig(SMALL, layout, dataclasses.replace(GPU, memory_bytes=memory_bytes),
                     global_batch=128, micro_batch=2)  # fmt: skip


@pytest.mark.parametrize(
    "cfg", [MoEConfig(mtp_depth=0), MoEConfig(mtp_depth=1, expert_hidden_size=1024),
            MoEConfig(num_layers=2, top_k=1, num_experts=4, mtp_depth=2)],
)  # fmt: skip
def test_flops_are_the_trainers(cfg):
    assert training_flops_per_token(SimModel.of(cfg, 256)) == flops.training_flops_per_token(
        cfg, 256, include_mtp=True
    )


@pytest.mark.parametrize(
    "cfg", [MoEConfig(mtp_depth=0, expert_hidden_size=1024),
            MoEConfig(mtp_depth=0, hidden_size=128, num_heads=4, num_kv_heads=4, num_layers=2,
                      num_experts=4, top_k=1, vocab_size=1000)],
)  # fmt: skip
def test_reference_layout_is_what_the_trainers_ledger_counts(cfg):
    torch.manual_seed(0)
    model = MoETransformer(cfg).train()
    batch, seq = 2, 64
    x = torch.randint(cfg.vocab_size, (batch, seq))
    y = torch.randint(cfg.vocab_size, (batch, seq))
    layout = reference_layout(SimModel.of(cfg, seq))
    tokens = batch * seq
    slots = tokens * cfg.top_k * cfg.num_layers
    runners: tuple[tuple[PolicyName, OpRunner], ...] = (
        ("keep-all", KeepAll()), ("selective", SelectiveRecompute()),
        ("full-recompute", FullRecompute()),
    )  # fmt: skip
    for name, runner in runners:
        budget = AccountedBudget(None)
        model.set_runner(runner)
        with budget.track():
            loss = model(x, y).loss
            measured = budget.saved_bytes()
        del loss
        model.set_runner(DIRECT)
        predicted = layout.microbatch_bytes(name, tokens, cfg.num_layers, slots, slots)
        assert measured == pytest.approx(predicted, rel=0.005), name


def test_dispatch_conserves_tokens_and_the_hot_rank_is_the_largest():
    rng = np.random.default_rng(1)
    for skew in routing.SKEW_NAMES:
        draws = routing.draw(rng, (50, 4), 6, 64, 8, skew)
        slots = routing.rank_slots(draws.ratio, draws.hot_expert, 64, 16, 16 * 1024 * 8)
        np.testing.assert_allclose(slots.sum(axis=-1), 16 * 1024 * 8)
        np.testing.assert_allclose(
            slots.max(axis=-1), routing.hottest_share(draws.ratio, 64, 16) * 16 * 1024 * 8
        )
        assert (slots >= 0).all()


@pytest.mark.parametrize(("stages", "microbatches"), [(1, 4), (4, 4), (4, 16), (16, 64), (8, 3)])
def test_equal_stage_times_give_the_1f1b_bubble(stages, microbatches):
    timeline = simulate_1f1b(np.ones((stages, microbatches)), 2 * np.ones((stages, microbatches)))
    expected = bubble_fraction(stages, microbatches)
    assert timeline.idle_fraction == pytest.approx(expected)
    assert expected == (stages - 1) / (microbatches + stages - 1) < 1


def test_saved_bytes_never_go_negative_and_peak_at_warmup():
    rng = np.random.default_rng(2)
    orders = stage_orders(4, 8)
    saved = rng.uniform(1, 2, size=(3, 4, 8))
    peaks = peak_saved_bytes(saved, orders)
    for s, order in enumerate(orders):
        alive = 0.0
        for is_forward, j in order:
            alive += saved[0, s, j] if is_forward else -saved[0, s, j]
            assert alive >= -1e-9
    # stage s keeps min(p - s, m) micro-batches alive at its warm-up
    assert (peaks[:, 0] >= peaks[:, 3]).all()
    np.testing.assert_allclose(peaks[:, 3], saved[:, 3, :].max(axis=-1))


def test_keep_all_without_skew_and_with_memory_to_spare_never_ooms():
    result = simulate(_config(memory_bytes=1e15), JobSpec(skew="none", iterations=20))
    assert result.ooms == 0 and result.completed == 20
    assert 0 < result.mfu_mean < 1


def test_more_skew_never_lowers_a_static_policys_oom_rate():
    # memory between keep-all's calm peak and its spiky peaks
    calm = simulate(_config(), JobSpec(skew="calm", iterations=200, seed=3))
    peak = max(float(r.peak_memory_bytes.max()) for r in calm.iterations)
    rates = {
        policy: [
            simulate(_config(memory_bytes=peak * 1.02), JobSpec(policy, skew, 200, seed=3)).oom_rate
            for skew in ("none", "calm", "spiky")
        ]
        for policy in ("keep-all", "selective")
    }
    for policy, by_skew in rates.items():
        assert by_skew == sorted(by_skew), policy
    assert rates["keep-all"][1] == 0 < rates["keep-all"][2]


def test_adaptive_avoids_the_ooms_of_keep_all_at_a_cost():
    calm = simulate(_config(), JobSpec(skew="calm", iterations=100, seed=4))
    memory = 1.02 * max(float(r.peak_memory_bytes.max()) for r in calm.iterations)
    keep = simulate(_config(memory_bytes=memory), JobSpec("keep-all", "spiky", 100, seed=4))
    adaptive = simulate(_config(memory_bytes=memory), JobSpec("adaptive", "spiky", 100, seed=4))
    assert keep.ooms > 0 and adaptive.ooms == 0
    assert adaptive.effective_tokens_per_s > keep.effective_tokens_per_s


def test_a_layout_that_does_not_divide_names_each_mismatch():
    bad = _config(pipeline=3, expert=5)
    with pytest.raises(ClusterSimConfigError) as caught:
        bad.validate()
    message = str(caught.value)
    assert "num_layers 8 is not a multiple of pipeline x virtual_stages = 3 x 1 = 3" in message
    assert "devices 64 is not a multiple of tensor x pipeline x context" in message
    assert "expert 5 must divide num_experts 16" in message


def test_uneven_layers_only_when_asked_and_fsdp_shards_the_weights():
    """7 layers over 2 stages: refused naming the flag, else split 4 + 3 (the last stage,
    with the head, fewer); FSDP puts less on every rank than the distributed optimizer."""
    model = dataclasses.replace(SMALL, num_layers=7)

    def config(**parallel: Any) -> SimConfig:
        layout = dataclasses.replace(Parallel(pipeline=2, expert=8), **parallel)
        return SimConfig(model, layout, GPU, global_batch=128, micro_batch=2)

    with pytest.raises(ClusterSimConfigError, match="uneven_layers = true splits them"):
        config().validate()
    uneven = simulate(config(uneven_layers=True), JobSpec(skew="none", iterations=2))
    sharded = simulate(config(uneven_layers=True, fsdp=True), JobSpec(skew="none", iterations=2))
    assert uneven.ooms == sharded.ooms == 0
    for a, b in zip(uneven.iterations, sharded.iterations, strict=True):
        assert (b.peak_memory_bytes < a.peak_memory_bytes).all()
        assert b.time_s == pytest.approx(a.time_s)  # its collectives are taken as hidden
