"""Dual-batch interleaving (targets/cluster_sim/dual_batch.py): never slower than the adaptive
policy without it, never over memory, and its fills where the bubbles are."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from moeperf.targets.cluster_sim.config import Cluster, Parallel, SimConfig, SimModel
from moeperf.targets.cluster_sim.dual_batch import plan_dual_batch
from moeperf.targets.cluster_sim.pipeline import simulate_1f1b, stage_orders
from moeperf.targets.cluster_sim.simulate import JobSpec, simulate

MODEL = SimModel(num_layers=8, hidden_size=1024, num_heads=16, num_kv_heads=4, head_dim=64,
                 num_experts=16, top_k=2, expert_hidden_size=2048, vocab_size=32000,
                 seq_len=2048)  # fmt: skip
GPU = Cluster(devices=64, peak_flops_per_s=989e12, memory_bytes=80e9, hbm_bytes_per_s=3.35e12,
              scale_up_domain=8, scale_up_bytes_per_s=450e9, scale_out_bytes_per_s=50e9,
              host_link_bytes_per_s=55e9)  # fmt: skip


def _config(memory_bytes: float, pipeline: int = 4, virtual: int = 1) -> SimConfig:
    cluster = dataclasses.replace(GPU, memory_bytes=memory_bytes)
    layout = Parallel(pipeline=pipeline, expert=8, virtual_stages=virtual)
    return SimConfig(MODEL, layout, cluster, 128, 2)


def _tight_memory(pipeline: int, virtual: int) -> float:
    """A memory between full recompute's peak and keep-all's calm one: adaptive works."""

    def peak(policy: str) -> float:
        job = JobSpec(policy, "calm", 5, seed=1)  # type: ignore[arg-type]
        run = simulate(_config(1e15, pipeline, virtual), job)
        return max(float(r.peak_memory_bytes.max()) for r in run.iterations)

    return (peak("full-recompute") + peak("keep-all")) / 2


# (pipeline, virtual stages, skew, seed); 8 layers: pipeline x virtual must divide them.
CASES = [(4, 1, "calm", 0), (4, 1, "spiky", 1), (2, 1, "spiky", 2), (8, 1, "spiky", 3),
         (2, 2, "spiky", 4), (4, 2, "spiky", 5), (2, 4, "calm", 6)]  # fmt: skip


@pytest.mark.parametrize(("pipeline", "virtual", "skew", "seed"), CASES)
def test_dual_batch_never_makes_an_iteration_slower_or_overflows(pipeline, virtual, skew, seed):
    memory = _tight_memory(pipeline, virtual)
    cfg = _config(memory, pipeline, virtual)
    plain = simulate(cfg, JobSpec("adaptive", skew, 30, seed=seed))
    dual = simulate(cfg, JobSpec("adaptive-dual", skew, 30, seed=seed))
    assert plain.ooms == dual.ooms == 0
    assert sum(r.recompute_s for r in plain.iterations) > 0  # the policy did add work
    moved = 0.0
    for a, b in zip(plain.iterations, dual.iterations, strict=True):
        assert b.time_s <= a.time_s * (1 + 1e-12), (a.iteration, a.time_s, b.time_s)
        assert (b.peak_memory_bytes <= memory).all()
        assert 0 <= b.moved_s <= b.recompute_s + 1e-12
        moved += b.moved_s
        assert b.decision_s > 0 or b.recompute_s == 0
    assert moved > 0  # some work did find a bubble


def test_a_fill_goes_into_the_first_bubble_after_its_forward_within_memory():
    # Two stages, two micro-batches. Stage 0 runs F0 F1 B0 B1 and idles twice: 2 s before
    # B0 (stage 1 is busy with F0 and B0) and 5 s before B1 (stage 1's B1 is slow). B1
    # carries 0.5 s of recompute restoring 10 bytes per second moved; micro-batch 1 is
    # forwarded by then, so the first bubble (before B0, position 2) takes it all.
    forward = np.ones((2, 2))
    backward = np.array([[2.0, 2.5], [2.0, 6.0]])
    orders = stage_orders(2, 2)
    timeline = simulate_1f1b(forward, backward, 0.0, orders)
    extra = np.array([[[0.0, 0.5], [0.0, 0.0]]])
    restored = extra * 10
    saved = np.ones((1, 2, 2))
    no_comm = np.zeros((2, 2))
    roomy = plan_dual_batch(timeline, forward, backward, orders, no_comm, no_comm, extra,
                            restored, saved, np.full((1, 2), 1e9))  # fmt: skip
    assert orders[0] == [(True, 0), (True, 1), (False, 0), (False, 1)]
    np.testing.assert_allclose(roomy.fill_s[0], [0.0, 0.0, 0.5, 0.0])
    assert roomy.moved_s[0, 1] == pytest.approx(0.5)
    again = simulate_1f1b(forward, backward - roomy.moved_s, 0.0, orders, fill_s=roomy.fill_s)
    assert again.makespan_s <= timeline.makespan_s
    # Alive during B0 is 2 bytes (both micro-batches), during B1 1; a limit of 4 bytes:
    # the bubble before B0 moves 0.2 s (2 bytes restored, alive to B1), the one before B1
    # 0.1 s more (4 - 1 - 2 = 1 byte left there).
    held = np.cumsum([1, 1, -1, -1]).max()
    tight = plan_dual_batch(timeline, forward, backward, orders, no_comm, no_comm, extra,
                            restored, saved, np.full((1, 2), held + 2.0))  # fmt: skip
    np.testing.assert_allclose(tight.fill_s[0], [0.0, 0.0, 0.2, 0.1])
    assert tight.moved_s[0, 1] == pytest.approx(0.3)
    assert tight.held_bytes[0, 0] <= held + 2.0 + 1e-9


@pytest.mark.parametrize("virtual", [2, 4])
def test_interleaving_shrinks_the_bubble_and_holds_more_in_flight(virtual):
    """Interleaved 1F1B in the simulator: the idle share falls toward (p - 1) / (v m + p - 1)
    and rank 0's keep-all peak rises (Megatron's warm-up keeps more chunks alive). A small
    vocabulary, so that the head does not make the last chunk the whole story."""

    def run(chunks: int):
        cfg = _config(1e15, 2, chunks)
        model = dataclasses.replace(MODEL, vocab_size=512)
        cfg = dataclasses.replace(cfg, model=model, global_batch=512)  # 8 micro-batches
        return simulate(cfg, JobSpec("keep-all", "none", 3))

    one, many = run(1), run(virtual)
    assert many.ooms == one.ooms == 0
    for a, b in zip(one.iterations, many.iterations, strict=True):
        assert b.idle_fraction < a.idle_fraction
        assert b.peak_memory_bytes[0] > a.peak_memory_bytes[0]
