"""The recipe's options (targets/cluster_sim/recipe.py), each against a worked example
computed by hand in the test's comments: the all-to-all's bytes and links by dispatcher,
FP8 GEMMs, the 1F1B A2A overlap's pairs and what it hides, tensor-parallel overlap, the
data-parallel reduction, and MoE parallel folding."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from moeperf.targets.cluster_sim.comm import (
    a2a_seconds_per_slot,
    deepep_bytes_per_s,
    expert_domains,
    remote_domains_per_token,
)
from moeperf.targets.cluster_sim.config import (
    Cluster,
    ClusterSimConfigError,
    Parallel,
    SimConfig,
    SimModel,
)
from moeperf.targets.cluster_sim.overlap import (
    hide_transfers,
    overlap_pairs,
    overlapped_single_stage_order,
)
from moeperf.targets.cluster_sim.ranks import rank_orders
from moeperf.targets.cluster_sim.recipe import Recipe
from moeperf.targets.cluster_sim.simulate import JobSpec, simulate
from moeperf.targets.cluster_sim.stages import data_parallel_step_s, op_times, stages

# 16 experts of width 100 on a hidden size of 1000, top-2; 4 layers, one attention head of
# 100 dims so the attention arithmetic stays small.
MODEL = SimModel(num_layers=4, hidden_size=1000, num_heads=1, num_kv_heads=1, head_dim=100,
                 num_experts=16, top_k=2, expert_hidden_size=100, vocab_size=1000,
                 seq_len=100)  # fmt: skip
# Round numbers: scale-up 100 GB/s, scale-out 10 GB/s, 4 devices a domain, efficiencies 1.
NODE = Cluster(devices=16, peak_flops_per_s=1e12, memory_bytes=1e12, hbm_bytes_per_s=1e12,
               scale_up_domain=4, scale_up_bytes_per_s=100e9, scale_out_bytes_per_s=10e9,
               host_link_bytes_per_s=1e9, gemm_efficiency=1.0, comm_efficiency=1.0,
               fp8_peak_flops_per_s=2e12, fp8_gemm_efficiency=1.0)  # fmt: skip


def _cfg(
    recipe: Recipe = Recipe(),  # noqa: B008 (frozen)
    model: SimModel = MODEL,
    global_batch: int = 16,
    **layout: Any,
) -> SimConfig:
    parallel = dataclasses.replace(Parallel(expert=16), **layout)
    return SimConfig(model, parallel, NODE, global_batch,
                     micro_batch=1, recipe=recipe)  # fmt: skip


def test_remote_domains_are_the_hypergeometric_chance_of_a_hit():
    cfg = _cfg()
    assert expert_domains(cfg) == 4  # 16 expert ranks, 4 a domain
    # No group limit: a domain holds 4 of 16 experts; P(neither of 2 distinct experts is
    # there) = C(12, 2) / C(16, 2) = 66 / 120; 3 remote domains x (1 - 0.55) = 1.35.
    assert remote_domains_per_token(cfg) == pytest.approx(1.35)
    # Node-limited: 4 groups (one per domain), 2 a token. A chosen domain is missed with
    # C(4, 2) / C(8, 2) = 6 / 28; remote ones are chosen with 2 / 4 of the 3: 3 x 0.5 x 22/28.
    limited = dataclasses.replace(MODEL, expert_groups=4, expert_groups_per_token=2)
    assert remote_domains_per_token(_cfg(model=limited)) == pytest.approx(1.5 * 22 / 28)
    # Groups that are not the domains limit nothing the simulator can place.
    other = dataclasses.replace(MODEL, expert_groups=8, expert_groups_per_token=2)
    assert remote_domains_per_token(_cfg(model=other)) == pytest.approx(1.35)


def test_a2a_seconds_per_slot_by_dispatcher_and_dispatch_width():
    # Dispatch + combine of one slot: 1000 elements x (2 + 2) bytes = 4000 bytes.
    # alltoall: 3/4 of slots leave the domain at 10 GB/s, 1/4 stay at 100 GB/s, both at
    # once: 4000 x max(0.75 / 10e9, 0.25 / 100e9) = 3.0e-7 s.
    assert a2a_seconds_per_slot(_cfg(), forward=True) == pytest.approx(3.0e-7)
    # deepep: 1.35 remote domains a token, i.e. 0.675 per slot, over scale-out; every slot
    # once over scale-up; at DeepEP's measured rates, not comm_efficiency: EP 16's 43 GB/s
    # of a 50 GB/s NIC scaled to this 10 GB/s one (8.6 GB/s), 153/160 of the 100 GB/s
    # NVLink: 4000 x max(0.675 / 8.6e9, 1 / 95.625e9) = 3.1395e-7 s.
    deepep = _cfg(Recipe(dispatcher="deepep"))
    assert deepep_bytes_per_s(deepep) == pytest.approx((8.6e9, 95.625e9))
    assert a2a_seconds_per_slot(deepep, forward=True) == pytest.approx(4000 * 0.675 / 8.6e9)
    # FP8 dispatch: 1000 x (1 + 4/128) + 1000 x 2 = 3031.25 bytes forward; backward BF16.
    fp8 = _cfg(Recipe(dispatcher="deepep", fp8_dispatch=True))
    assert a2a_seconds_per_slot(fp8, forward=True) == pytest.approx(3031.25 * 0.675 / 8.6e9)
    assert a2a_seconds_per_slot(fp8, forward=False) == pytest.approx(4000 * 0.675 / 8.6e9)
    # EP 32 and 64 take their own rows, others the nearest on a log scale.
    for ep, rate in ((32, 58e9), (64, 51e9), (20, 43e9), (24, 58e9), (128, 51e9)):
        wide = dataclasses.replace(deepep, parallel=dataclasses.replace(deepep.parallel, expert=ep))
        assert deepep_bytes_per_s(wide)[0] == pytest.approx(rate / 5), ep
    # Inside one domain (4 expert ranks): everything over scale-up, 4000 / 100e9.
    assert a2a_seconds_per_slot(_cfg(expert=4), forward=True) == pytest.approx(4.0e-8)


def test_fp8_runs_the_blocks_gemms_at_the_fp8_rate_and_the_rest_at_bf16():
    # One stage of 4 layers, 100 tokens. Per token and layer: projections 1000 x (100 + 200)
    # + 100 x 1000 = 400,000 MACs (GEMM); scores 2 x 100 x 100 x 0.5 = 10,000 and router
    # 1000 x 16 = 16,000 MACs (BF16); head 1000 x 1000 = 1e6 MACs once (BF16).
    # Forward seconds = 2 x 100 x MACs / rate.
    gemm_macs, other_macs = 4 * 400_000, 4 * (10_000 + 16_000) + 1_000_000
    for recipe, gemm_rate in ((Recipe(), 1e12), (Recipe(precision="fp8"), 2e12)):
        cfg = _cfg(recipe)
        times = op_times(cfg, stages(cfg), tokens=100)
        expected = 200 * gemm_macs / gemm_rate + 200 * other_macs / 1e12
        assert times.fixed_fwd[0] == pytest.approx(expected)
        # A routed slot: 3 x 1000 x 100 MACs, twice that in FLOPs, at the GEMM rate.
        assert times.expert_fwd_per_slot == pytest.approx(6e5 / gemm_rate)


def test_fp8_needs_a_device_with_an_fp8_peak():
    no_fp8 = dataclasses.replace(NODE, fp8_peak_flops_per_s=0.0)
    cfg = dataclasses.replace(_cfg(Recipe(precision="fp8")), cluster=no_fp8)
    with pytest.raises(ClusterSimConfigError, match="precision fp8 needs a cluster"):
        cfg.validate()


def test_overlap_pairs_a_forward_with_another_micro_batchs_backward():
    # Never a micro-batch's own forward and backward: F0 B0 F1 B1 pairs B0 with F1 only.
    assert overlap_pairs([(True, 0), (False, 0), (True, 1), (False, 1)]) == [(1, 0)]
    # Without a pipeline the overlap runs one forward ahead, so that the memory model sees
    # both micro-batches of a pair alive at once.
    order = overlapped_single_stage_order(3)
    assert order == [(True, 0), (True, 1), (False, 0), (True, 2), (False, 1), (False, 2)]
    assert overlap_pairs(order) == [(1, 0), (2, 1)]
    assert rank_orders(1, 1, 3, a2a_overlap=True) == [order]
    # 1F1B on the first of 2 stages, 3 micro-batches: F0 F1 B0 F2 B1 B2; last stage F0 B0 ...
    first, last = rank_orders(2, 1, 3)
    assert overlap_pairs(first) == [(1, 0), (2, 1)]
    assert overlap_pairs(last) == [(1, 0), (2, 1)]  # B0 F1 and B1 F2 pair too


def test_hidden_transfers_are_what_the_pairs_compute_covers():
    order = overlapped_single_stage_order(3)  # pairs (F1, B0) and (F2, B1)
    compute_f, compute_b = np.ones((1, 3)), np.full((1, 3), 2.0)
    # Compute-bound: each pair has 3 s of compute for 1 s of transfers, all hidden; F0 and
    # B2 run alone and keep theirs.
    a2a = np.full((1, 3), 0.5)
    out_f, out_b = hide_transfers(compute_f, compute_b, a2a, a2a, [order])
    np.testing.assert_allclose(out_f, [[0.5, 0.0, 0.0]])
    np.testing.assert_allclose(out_b, [[0.0, 0.0, 0.5]])
    # Transfer-bound: 4 s of transfers under 3 s of compute leaves 1 s, shared 1:1.
    a2a = np.full((1, 3), 2.0)
    out_f, out_b = hide_transfers(compute_f, compute_b, a2a, a2a, [order])
    np.testing.assert_allclose(out_f, [[2.0, 0.5, 0.5]])
    np.testing.assert_allclose(out_b, [[0.5, 0.5, 2.0]])


def test_the_overlap_never_slows_an_iteration_and_hides_steady_transfers():
    base = _cfg(global_batch=64, expert=8, pipeline=2)  # 8 micro-batches, 6 in pairs
    plain = simulate(base, JobSpec(skew="none", iterations=2))
    hidden = simulate(dataclasses.replace(base, recipe=Recipe(a2a_overlap=True)),
                      JobSpec(skew="none", iterations=2))  # fmt: skip
    for a, b in zip(plain.iterations, hidden.iterations, strict=True):
        assert b.time_s < a.time_s


def test_tp_overlap_runs_tensor_parallel_transfers_under_the_gemms():
    # TP 2: per layer an all-gather and a reduce-scatter of 100 tokens x 1000 x 2 bytes x
    # 1/2 = 100 kB each, 200 kB over 100 GB/s = 2 us a layer, 8 us for 4 layers. The GEMMs
    # (projections, 1.6e6 MACs a token / 2 ranks) take 200 x 8e5 / 1e12 = 160 us: all
    # hidden with the overlap.
    # Two heads of 50: the same 400,000 projection MACs a token and layer.
    two_heads = dataclasses.replace(MODEL, num_heads=2, num_kv_heads=2, head_dim=50)
    plain = _cfg(model=two_heads, tensor=2, expert=8)
    times = op_times(plain, stages(plain), tokens=100)
    assert times.side_fwd[0] == pytest.approx(8e-6)
    assert times.side_bwd[0] == pytest.approx(8e-6)
    overlapped = dataclasses.replace(plain, recipe=Recipe(tp_comm_overlap=True))
    assert op_times(overlapped, stages(overlapped), tokens=100).side_fwd[0] == 0.0


def test_the_data_parallel_reduction_by_mode():
    # 16 devices, expert 4: data 16, expert-data 4. One stage holds plain weights of 4
    # layers x (attention 400,000 + router 16,000) + embedding and head 2 x 1e6 =
    # 3,664,000 and experts 4 layers x 4 experts x 300,000 = 4.8e6. The reduce-scatter
    # receives bf16 shards: 2 x (3,664,000 x 15/16 + 4.8e6 x 3/4) = 14,070,000 bytes over
    # scale-out (the 16 data ranks span 4 domains) at 10 GB/s: 1.407 ms; the optimizer's
    # all-gather as much again.
    cfg = _cfg(Recipe(dp_comm="exposed"), expert=4)
    assert (cfg.data_parallel, cfg.expert_data_parallel) == (16, 4)
    chunks = stages(cfg)
    assert data_parallel_step_s(cfg, chunks, 0.0, 0.0) == pytest.approx(2 * 1.407e-3)
    hidden = dataclasses.replace(cfg, recipe=Recipe(dp_comm="hidden"))
    assert data_parallel_step_s(hidden, chunks, 0.0, 0.0) == 0.0
    overlapped = dataclasses.replace(cfg, recipe=Recipe(dp_comm="overlapped"))
    # Under a last backward of 1 ms and a first forward of 2 ms: 0.407 ms left of one.
    assert data_parallel_step_s(overlapped, chunks, 1e-3, 2e-3) == pytest.approx(0.407e-3)


def test_folding_spreads_experts_over_tensor_ranks_with_sequence_parallel_tokens():
    # 16 devices, tensor 2: data 8. Expert 16 does not fit data x context = 8; folded over
    # tensor x data x context = 16 it does. A rank dispatches its half of the 100 tokens.
    two_heads = dataclasses.replace(MODEL, num_heads=2, num_kv_heads=2, head_dim=50)
    cfg = _cfg(model=two_heads, tensor=2, expert=16)
    cfg.validate()
    assert cfg.data_parallel == 8 and cfg.expert_data_parallel == 1
    assert cfg.moe_tokens_per_rank == 50
    # Experts split over both tensor ranks: the tokens are gathered back, 4 expert ranks.
    split = _cfg(model=two_heads, tensor=2, expert=8, expert_tensor=2)
    split.validate()
    assert split.moe_tokens_per_rank == 100 and split.expert_data_parallel == 1
    with pytest.raises(ClusterSimConfigError, match="expert x expert_tensor = 16 x 2 must divide"):
        _cfg(model=two_heads, tensor=2, expert=16, expert_tensor=2).validate()
