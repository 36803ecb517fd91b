"""Interleaved 1F1B (Megatron's virtual pipeline stages): every op once and in a runnable
order, one chunk reducing to plain 1F1B, the bubble of Narayanan et al. 2021 (section 2.2.2)
measured by the event simulation, and the warm-up's extra activations."""

from __future__ import annotations

import re

import numpy as np
import pytest

from moeperf.targets.cluster_sim.pipeline import (
    interleaved_bubble_fraction,
    interleaved_orders,
    peak_saved_bytes,
    peak_saved_bytes_interleaved,
    simulate_1f1b,
    simulate_interleaved,
    stage_orders,
)

LAYOUTS = [(2, 2, 4), (4, 2, 8), (4, 4, 8), (8, 2, 16), (3, 3, 6), (4, 2, 4), (4, 3, 12)]


def _equal_times_s(p: int, v: int, m: int, t_s: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """A stage's forward takes ``t_s`` and its backward ``2 t_s``, split evenly over v chunks."""
    return np.full((p, v, m), t_s / v), np.full((p, v, m), 2 * t_s / v)


def _in_flight(order: list[tuple[bool, int, int]]) -> np.ndarray:
    """Chunk activations alive after each op of one rank's order."""
    return np.cumsum([1 if is_forward else -1 for is_forward, _, _ in order])


@pytest.mark.parametrize("p, v, m", [*LAYOUTS, (4, 1, 8), (1, 3, 5)])
def test_every_chunk_and_microbatch_runs_once_each_way_forward_first(p, v, m):
    everything = {(c, j) for c in range(v) for j in range(m)}
    for order in interleaved_orders(p, v, m):
        forwards = [(c, j) for f, c, j in order if f]
        backwards = [(c, j) for f, c, j in order if not f]
        assert len(forwards) == len(backwards) == v * m
        assert set(forwards) == set(backwards) == everything
        position = {op: i for i, op in enumerate(order)}
        assert all(position[(True, c, j)] < position[(False, c, j)] for c, j in everything)


@pytest.mark.parametrize("p, m", [(1, 1), (1, 4), (2, 3), (4, 4), (4, 8), (8, 5)])
def test_one_chunk_is_plain_1f1b(p, m):
    expected = [[(f, 0, j) for f, j in order] for order in stage_orders(p, m)]
    assert interleaved_orders(p, 1, m) == expected


def test_megatron_warmup_and_chunk_groups():
    # p = 2, v = 2, m = 4: rank 0 warms up with (2 - 0 - 1) * 2 + (2 - 1) * 2 = 4 forwards,
    # micro-batches in groups of p = 2 per chunk; backwards take chunk 1 first.
    rank0, rank1 = interleaved_orders(2, 2, 4)
    assert rank0 == [
        (True, 0, 0), (True, 0, 1), (True, 1, 0), (True, 1, 1),
        (True, 0, 2), (False, 1, 0), (True, 0, 3), (False, 1, 1),
        (True, 1, 2), (False, 0, 0), (True, 1, 3), (False, 0, 1),
        (False, 1, 2), (False, 1, 3), (False, 0, 2), (False, 0, 3),
    ]  # fmt: skip
    assert rank1[:3] == [(True, 0, 0), (True, 0, 1), (True, 1, 0)]  # (v - 1) p = 2 warm-up
    assert rank1[3] == (False, 1, 0)


def test_m_equal_p_runs_all_forwards_first_as_megatron_does():
    for order in interleaved_orders(4, 2, 4):
        assert all(f for f, _, _ in order[:8]) and not any(f for f, _, _ in order[8:])


@pytest.mark.parametrize(
    "p, v, m, message",
    [(0, 2, 4, "must be >= 1"), (2, 0, 4, "must be >= 1"), (2, 2, 0, "must be >= 1"),
     (4, 2, 6, "microbatches (6) to be a multiple of stages (4)")],
)  # fmt: skip
def test_bad_layouts_say_what_is_wrong(p, v, m, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        interleaved_orders(p, v, m)
    if p >= 1 and v >= 1 and m >= 1:
        return
    with pytest.raises(ValueError, match="must be >= 1"):
        interleaved_bubble_fraction(p, v, m)


def test_one_chunk_bubble_is_1f1bs():
    assert interleaved_bubble_fraction(4, 1, 8) == pytest.approx(3 / 11)


@pytest.mark.parametrize("p, v, m", LAYOUTS)
def test_measured_bubble_is_narayanans_with_equal_times(p, v, m):
    forward_s, backward_s = _equal_times_s(p, v, m)
    timeline = simulate_interleaved(forward_s, backward_s)
    assert timeline.idle_fraction == pytest.approx(interleaved_bubble_fraction(p, v, m), abs=1e-9)
    # the bubble as time: (p - 1) forward-backward units of 3 t_s, shrunk v-fold
    assert timeline.makespan_s == pytest.approx(3 * m + 3 * (p - 1) / v, abs=1e-9)


@pytest.mark.parametrize("p, v, m", [(4, 2, 8), (4, 4, 8), (8, 2, 16)])
def test_interleaving_beats_plain_1f1b_for_the_same_work(p, v, m):
    forward_s, backward_s = _equal_times_s(p, v, m)
    interleaved = simulate_interleaved(forward_s, backward_s)
    plain = simulate_1f1b(np.full((p, m), 1.0), np.full((p, m), 2.0))
    assert interleaved.busy_s == pytest.approx(plain.busy_s)
    assert interleaved.makespan_s < plain.makespan_s
    assert interleaved.idle_fraction < plain.idle_fraction


def test_one_chunk_simulates_as_1f1b_with_skewed_times_and_hops():
    rng = np.random.default_rng(0)
    forward_s = rng.uniform(0.5, 1.5, (4, 1, 8))
    backward_s = rng.uniform(1.0, 3.0, (4, 1, 8))
    interleaved = simulate_interleaved(forward_s, backward_s, hop_s=0.1)
    plain = simulate_1f1b(forward_s[:, 0], backward_s[:, 0], hop_s=0.1)
    assert interleaved.makespan_s == pytest.approx(plain.makespan_s)
    np.testing.assert_allclose(interleaved.forward_end_s[:, 0], plain.forward_end_s)
    np.testing.assert_allclose(interleaved.backward_end_s[:, 0], plain.backward_end_s)


def test_dependencies_hold_in_the_simulated_timeline():
    p, v, m, hop_s = 4, 2, 8, 0.05
    rng = np.random.default_rng(1)
    forward_s = rng.uniform(0.2, 0.8, (p, v, m))
    backward_s = rng.uniform(0.4, 1.6, (p, v, m))
    timeline = simulate_interleaved(forward_s, backward_s, hop_s=hop_s)
    f_end = timeline.forward_end_s.transpose(1, 0, 2).reshape(v * p, m)  # [global stage, m]
    b_end = timeline.backward_end_s.transpose(1, 0, 2).reshape(v * p, m)
    f_took = forward_s.transpose(1, 0, 2).reshape(v * p, m)
    b_took = backward_s.transpose(1, 0, 2).reshape(v * p, m)
    assert np.all(f_end[1:] - f_took[1:] >= f_end[:-1] + hop_s - 1e-12)
    assert np.all(b_end[:-1] - b_took[:-1] >= b_end[1:] + hop_s - 1e-12)
    assert np.all(b_end[-1] - b_took[-1] >= f_end[-1] - 1e-12)
    assert timeline.makespan_s == pytest.approx(b_end.max())


def test_bad_time_shapes_are_refused():
    with pytest.raises(ValueError, match=r"\[p, v, m\]"):
        simulate_interleaved(np.ones((2, 4)), np.ones((2, 4)))


def test_an_order_that_cannot_run_deadlocks_loudly():
    orders = interleaved_orders(2, 2, 2)
    orders[1] = orders[1][::-1]  # rank 1 would start with a backward it cannot have
    with pytest.raises(RuntimeError, match="deadlocked"):
        simulate_interleaved(*_equal_times_s(2, 2, 2), orders=orders)


@pytest.mark.parametrize("p, m", [(4, 8), (3, 5), (1, 2)])
def test_one_chunk_peak_is_1f1bs(p, m):
    saved = np.random.default_rng(2).uniform(1.0, 5.0, (3, p, m))  # a leading batch axis
    np.testing.assert_allclose(
        peak_saved_bytes_interleaved(saved[..., None, :], interleaved_orders(p, 1, m)),
        peak_saved_bytes(saved, stage_orders(p, m)),
    )


@pytest.mark.parametrize("p, v, m", LAYOUTS)
def test_memory_never_goes_negative_and_is_all_given_back(p, v, m):
    saved = np.random.default_rng(3).uniform(1.0, 5.0, (p, v, m))
    for r, order in enumerate(interleaved_orders(p, v, m)):
        steps = [(1 if f else -1) * saved[r, c, j] for f, c, j in order]
        alive_bytes = np.cumsum(steps)
        assert alive_bytes.min() >= -1e-9
        assert alive_bytes[-1] == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize("p, v, m", [(4, 2, 8), (4, 4, 8), (8, 2, 16), (4, 3, 12)])
def test_interleaving_holds_more_chunks_in_warmup(p, v, m):
    orders = interleaved_orders(p, v, m)
    peaks = [int(_in_flight(order).max()) for order in orders]
    # Rank r runs (p - r - 1) * 2 + (v - 1) * p warm-up forwards, then the steady state's
    # first forward before its first backward: one more chunk alive (m >= 2p, so uncapped).
    assert peaks == [(p - r - 1) * 2 + (v - 1) * p + 1 for r in range(p)]
    # 1F1B: stage r holds p - r micro-batches; rank 0 p of them.
    assert [int(_in_flight(o).max()) for o in interleaved_orders(p, 1, m)] == [
        p - r for r in range(p)
    ]
    # In bytes, with a chunk saving 1/v of a stage's micro-batch activations, rank 0 still
    # holds more than 1F1B's p: (2 (p - 1) + (v - 1) p + 1) / v > p whenever p >= 2.
    saved_bytes = np.full((p, v, m), 1.0 / v)
    rank0_bytes = peak_saved_bytes_interleaved(saved_bytes, orders)[0]
    assert rank0_bytes == pytest.approx(((p - 1) * 2 + (v - 1) * p + 1) / v)
    assert rank0_bytes > peak_saved_bytes(np.ones((p, m)), stage_orders(p, m))[0]


def test_m_equal_p_holds_every_chunk_at_once():
    orders = interleaved_orders(4, 2, 4)
    assert [int(_in_flight(order).max()) for order in orders] == [8, 8, 8, 8]
