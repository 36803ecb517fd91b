"""A serving scenario (one load level of a run) as a record, and the name it is shown and
stored under. Names are made from the record, never parsed back into one: whatever needs
a scenario's level, prompt length or repeat reads the record's fields."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

# How a level's load is offered: a number of closed-loop streams, an arrival rate (poisson
# or gamma arrivals), or a recorded trace replayed at a speed.
ScenarioMode = Literal["concurrency", "poisson", "gamma", "trace"]
# A prefix workload's no-reuse control level is named after its level: "c=4 unique".
UNIQUE_SUFFIX = " unique"


@dataclass(frozen=True, slots=True)
class Scenario:
    mode: ScenarioMode
    level: float  # streams, requests/s or the trace's speed-up
    input_tokens: int | None = None  # a sweep's prompt length
    unique: bool = False  # the no-reuse control of [workload.prefix]
    repeat: int | None = None  # 1-based when load.repeats > 1

    @property
    def name(self) -> str:
        """ "c=4", "rate=2", "trace x1"; "in=L ..." in a sweep; "... unique" for the
        no-reuse control of a prefix workload; "... #2" for the second repeat."""
        if self.mode == "concurrency":
            name = f"c={int(self.level)}"
        elif self.mode == "trace":
            name = f"trace x{self.level:g}"
        else:
            name = f"rate={self.level:g}"
        if self.input_tokens is not None:
            name = f"in={self.input_tokens} {name}"
        if self.unique:
            name += UNIQUE_SUFFIX
        if self.repeat is not None:
            name += f" #{self.repeat}"
        return name

    def at_any_length(self) -> Scenario:
        """This load level without its prompt length: what a sweep's lengths share."""
        return replace(self, input_tokens=None)
