"""The Pareto front against its definition, on hand-built and generated points."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from moeperf.collectors.pareto import pareto_front


def dominated(p: tuple[float, float], q: tuple[float, float]) -> bool:
    """q dominates p: at least as good on both axes, better on one."""
    return q[0] >= p[0] and q[1] >= p[1] and (q[0] > p[0] or q[1] > p[1])


def test_hand_built_points():
    # (tok/s/user, tok/s/accelerator): a trade-off curve, one point inside it, a duplicate.
    points = [(10.0, 100.0), (20.0, 80.0), (30.0, 40.0), (15.0, 70.0), (20.0, 80.0), (5.0, 100.0)]
    assert pareto_front(points) == [True, True, True, False, True, False]


def test_one_point_and_none():
    assert pareto_front([(1.0, 1.0)]) == [True]
    assert pareto_front([]) == []


def test_equal_x_keeps_only_the_highest_y():
    assert pareto_front([(1.0, 2.0), (1.0, 3.0), (0.5, 4.0)]) == [False, True, True]


coordinate = st.integers(min_value=-5, max_value=5).map(float)


@given(st.lists(st.tuples(coordinate, coordinate), max_size=40))
def test_on_the_front_exactly_when_no_point_dominates_it(points):
    front = pareto_front(points)
    for p, on in zip(points, front, strict=True):
        assert on == (not any(dominated(p, q) for q in points)), (p, points)
