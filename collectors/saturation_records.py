"""An open-loop level's signs of over-saturation, as its summary stores them; what each
sign is and how it is computed: collectors/saturation.py."""

from __future__ import annotations

from dataclasses import dataclass

CONFIDENCE = 0.99  # of each slope's one-sided margin of error
COMPLETION_SHORTFALL = 0.1  # completions below (1 - this) x arrivals: sign 1


@dataclass(frozen=True, slots=True)
class Slope:
    """A least-squares slope and its one-sided margin of error at ``CONFIDENCE``."""

    per_s: float
    margin: float
    samples: int

    @property
    def rising(self) -> bool:
        return self.per_s - self.margin > 0


@dataclass(frozen=True, slots=True)
class Saturation:
    """An open-loop level's three signs of over-saturation (collectors/saturation.py), and
    the verdict: all three at once."""

    arrivals_per_s: float
    completions_per_s: float
    in_flight: Slope  # requests in flight against time: requests per second
    ttft: Slope  # TTFT against arrival time: seconds of TTFT per second
    over_saturated: bool
