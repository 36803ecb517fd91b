"""The order a serving run's levels run in, and the prompt pool each one draws from.

Without a capacity search every level is known before the run starts: each prompt length
of a sweep, each load level, the no-reuse control of a prefix workload, all of it
``load.repeats`` times over, interleaved (every level once, then every level again), so
that drift over the run reaches every level alike. Each planned level names its pool
(``PoolKey``): with ``workload.cache = "fresh"`` its own, so no level is a cache hit of
another; with "reuse" one per prompt length and variant, shared by every level.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from moeperf.collectors.scenario import Scenario, ScenarioMode
from moeperf.suites.serving.load.arrivals import arrivals_bound
from moeperf.suites.serving.spec import ServingSpec
from moeperf.suites.serving.workload.prompts import PoolKey

# The pool that fit probes (and a capacity search) draw from, cycled on from probe to
# probe: their levels are decided as the run goes, so they cannot each have their own.
PROBE_DRAW = -1


@dataclass(frozen=True, slots=True)
class PromptPool:
    """A slice of the run's prompts that levels draw from: all of them (count 0), or
    one pool of several."""

    start: int = 0
    count: int = 0
    input_tokens: int | None = None  # a sweep's prompt length
    unique: bool = False  # the no-reuse control of [workload.prefix]


ALL_PROMPTS = PromptPool()


def scenario_name(
    mode: ScenarioMode,
    level: float,
    input_tokens: int | None = None,
    unique: bool = False,
    repeat: int | None = None,
) -> str:
    """The name of the scenario these fields make (``Scenario.name``)."""
    return Scenario(mode, level, input_tokens, unique, repeat).name


@dataclass(frozen=True, slots=True)
class PlannedLevel:
    level: float
    key: PoolKey
    repeat: int | None  # 1-based when load.repeats > 1, else None
    # Run the length's fit search ([sweep.fit]) right after this level.
    fit_after: bool = False

    def scenario(self, mode: ScenarioMode) -> str:
        return scenario_name(mode, self.level, self.key.input_tokens, self.key.unique, self.repeat)


def level_schedule(spec: ServingSpec, lengths: Sequence[int | None]) -> list[PlannedLevel]:
    """Every level of a run without a capacity search, in the order they run."""
    repeats = spec.load.repeats
    fresh = spec.workload.cache == "fresh"
    controls = (False, True) if _has_control(spec) else (False,)
    planned: list[PlannedLevel] = []
    fits = spec.sweep is not None and spec.sweep.fit is not None
    for repeat in range(1, repeats + 1):
        for length in lengths:
            for i, level in enumerate(spec.load.levels):
                last = i == len(spec.load.levels) - 1
                for unique in controls:
                    draw = len(planned) if fresh else 0
                    planned.append(
                        PlannedLevel(
                            level,
                            PoolKey(length, unique, draw),
                            repeat if repeats > 1 else None,
                            fit_after=fits and repeat == 1 and last and unique == controls[-1],
                        )
                    )
    return planned


def _has_control(spec: ServingSpec) -> bool:
    prefix = spec.workload.prefix
    return prefix is not None and prefix.unique_control


def pool_keys(schedule: Sequence[PlannedLevel]) -> list[PoolKey]:
    """The distinct pools a schedule draws from, in first-use order."""
    keys: list[PoolKey] = []
    for planned in schedule:
        if planned.key not in keys:
            keys.append(planned.key)
    return keys


def pool_size(spec: ServingSpec, levels: Sequence[float], extra: int = 0) -> int:
    """The prompts a pool needs so that none of ``levels`` (those drawing from it) sends
    one twice, where the run knows that before it starts: workload.num_prompts at least;
    a level sends at most load.max_requests (and ``extra``, a capacity probe's warm-up),
    an open-loop one about its rate times its window (``arrivals_bound``). A closed-loop
    level bounded by time sends what the target answers: its repeats are counted
    (suites/serving/workload/repeats.py). With workload.cache = "reuse" the prompts are
    sent again on purpose, and a trace's requests bring their own: num_prompts."""
    workload, load = spec.workload, spec.load
    if workload.cache == "reuse" or workload.kind == "trace" or not levels:
        return workload.num_prompts
    bounds = []
    if load.max_requests is not None:
        bounds.append(load.max_requests + extra)
    if load.mode in ("poisson", "gamma"):
        burstiness = load.burstiness if load.mode == "gamma" else 1.0
        window_s = load.level_limit_s
        bounds.append(max(arrivals_bound(level, window_s, burstiness) for level in levels))
    return max(workload.num_prompts, min(bounds, default=0))
