"""The Pareto front of points where more is better on both axes.

A point is on the front when no other point is at least as good on both axes and better on
one (it is not dominated). Equal points are all on the front: neither dominates the other.
A deployment sweep's axes are output tokens/s per user and per accelerator (vLLM's
``bench sweep plot_pareto``): the front is every configuration and load level that no
other beats on both at once.
"""

from __future__ import annotations

from collections.abc import Sequence


def pareto_front(points: Sequence[tuple[float, float]]) -> list[bool]:
    """For each point (x, y), whether it is on the front (more is better on both axes).

    Sorted by x descending (y descending among equal x), a point is dominated exactly when
    an earlier point with a larger x has a y at least its own, or an earlier point with the
    same x has a larger y: one pass, O(n log n).
    """
    order = sorted(range(len(points)), key=lambda i: (-points[i][0], -points[i][1]))
    on_front = [False] * len(points)
    best_y_at_larger_x = float("-inf")  # over points of strictly larger x
    group_x: float | None = None
    group_best_y = float("-inf")  # the first (largest) y of the current x
    for i in order:
        x, y = points[i]
        if x != group_x:
            best_y_at_larger_x = max(best_y_at_larger_x, group_best_y)
            group_x, group_best_y = x, y
        on_front[i] = y == group_best_y and y > best_y_at_larger_x
    return on_front
