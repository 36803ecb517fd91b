"""A prefix workload's levels paired with their no-reuse controls ("c=4" and "c=4 unique"):
matched by what each scenario's record holds (its level, prompt length and repeat), never
by its name."""

from __future__ import annotations

from collections.abc import Mapping

from moeperf.collectors.serving_records import ScenarioSummary


def reuse_pairs(scenarios: Mapping[str, ScenarioSummary]) -> list[tuple[str, str]]:
    """(level, its no-reuse control) of every control whose level ran too, in the order
    the controls ran."""
    shared = {
        (e.level, e.input_tokens, e.repeat): name for name, e in scenarios.items() if not e.unique
    }
    pairs = []
    for name, entry in scenarios.items():
        level = shared.get((entry.level, entry.input_tokens, entry.repeat))
        if entry.unique and level is not None:
            pairs.append((level, name))
    return pairs
