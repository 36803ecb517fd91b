"""An elasticity drill (``[elastic]`` in a serving spec), as a serving run's summary holds
it: each scale or kill event with what it cost, the replicas' shares of the traffic, and
the verdicts against the spec's limits.

What each figure is (times in seconds):
- ``in_flight``: requests the replica held (running and waiting, its own /metrics) just
  before a scale-in deregistered it or a kill took it down; None where it exposes no such
  gauge. A request the replica has received but not yet queued is not in it.
- A kill's lost requests, split by when they were sent against the SIGKILL itself:
  ``lost_in_flight``, failed requests sent before it (in flight then: only the killed
  replica failed them); ``lost_undetected``, failed requests sent after it but within the
  router's detection time (its health-check interval x failure threshold: it could not
  know yet); and ``lost_after``, failed requests sent later (the router went on sending to
  the dead replica, or did not retry them elsewhere), up to the next event or the level's
  end.
- ``failed``, ``recovery_s``: the fault drill's (collectors/drill_records.py): requests that
  ended failed or cancelled from the event until the level recovered, and the event's start
  to the end of the first request sent at or after it that succeeded after it ended.
- ``first_served_s``: a scale-out's or restart's start to the first request the router
  counts as answered by that replica (its own per-replica counter, polled every 50 ms).
- ``drained_s``: a scale-in's deregistration to the replica holding no request (or the
  drain timeout), after which it was stopped.
- ``shares``: each replica's part of the requests the router sent during the level.
- ``output_tok_s_before`` / ``_after``: output tokens of the ok requests that ended in the
  ``compare_window_s`` before the event, and in the same window after the event's own end
  (never past the next event), per second of that window; None for an empty window.
- ``serving_before``: replicas serving (started, not scaled in or killed) before the event.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

EventVerdict = Literal["pass", "fail", "not judged"]


@dataclass(frozen=True, slots=True)
class ElasticEvent:
    index: int
    action: str  # scale_out, scale_in, kill, restart
    replica: int
    at_s: float  # from the level's start, as done
    done: bool  # False: the action failed (``detail`` says why); the drill went on
    detail: str
    in_flight: float | None
    first_served_s: float | None
    drained_s: float | None
    failed: int
    failed_by_type: dict[str, int]
    recovery_s: float | None
    verdict: EventVerdict
    why: str
    lost_in_flight: int | None = None  # a kill's (module docstring)
    lost_undetected: int | None = None
    lost_after: int | None = None
    output_tok_s_before: float | None = None
    output_tok_s_after: float | None = None
    serving_before: int | None = None


@dataclass(frozen=True, slots=True)
class ElasticSummary:
    router: str  # what routed, in words: "sglang-router 0.3.2, round_robin, ..."
    replicas_started: int  # before the level, then one per scale-out
    events: tuple[ElasticEvent, ...]
    # Replica index -> its share of the requests the router sent during the level.
    shares: dict[int, float]

    @property
    def failed_events(self) -> tuple[ElasticEvent, ...]:
        return tuple(e for e in self.events if e.verdict == "fail")


@dataclass(frozen=True, slots=True)
class ElasticAction:
    """One event as the harness carried it out (suites/serving/elastic/drill.py)."""

    index: int
    action: str
    replica: int
    in_flight: float | None
    first_served_s: float | None
    drained_s: float | None
    serving_before: int | None = None
    # A kill's SIGKILL on the run's clock: its lost requests are split at this instant (the
    # event starts earlier, with the read of the replica's gauge).
    struck_ns: int | None = None
