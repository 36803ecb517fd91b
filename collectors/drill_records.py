"""A fault drill (``[drill]`` in a serving spec), as a serving run's summary holds it.

Times are seconds from the drill level's start. What each figure is:
- ``fault_s``: how long the fault itself lasted, as injected (the kill to the restarted
  target's READY, the SIGSTOP to the SIGCONT, the window, the hook to a healthy answer).
- ``recovery_s``: the fault's injection to the end of the first request sent at or after
  it that succeeded and ended after the fault itself ended (None: none did before the
  level ended). A request already in flight does not count, nor one that slipped in
  before the fault took hold: what a user wants to know is when a new request works
  again.
- ``failed``: requests that ended failed or cancelled between the injection and the
  recovery or the next fault, whichever came first, by error type.
- ``requests_hit``: for a window fault (``http_error``, ``reset``, ``malformed``), the
  requests the target itself says the window caught: the ground truth for ``failed``. 0
  means the fault was not tested (nothing reached the target while the window was open);
  None for the other faults, or a target that did not say.
- Latencies (``before``, ``during``, ``after``): the median TTFT and E2E (from the
  intended send) of the successful requests sent in the ``compare_window_s`` before the
  injection, between the injection and the recovery, and in the window after the
  recovery.
"""

from __future__ import annotations

from dataclasses import dataclass

from moeperf.collectors.request_audit import RequestAudit


@dataclass(frozen=True, slots=True)
class FaultEvent:
    """One fault as the harness injected it; ``*_ns`` on the run's clock (from its anchor)."""

    index: int
    kind: str
    planned_at_s: float
    injected_ns: int
    cleared_ns: int  # when the fault itself ended (see ``fault_s``)
    injected: bool  # False: the injection failed (``detail`` says why); the run went on
    detail: str
    requests_hit: int | None = None  # a window fault's, as the target counted them


@dataclass(frozen=True, slots=True)
class LatencyWindow:
    requests: int  # successful requests sent in the window
    ttft_p50_s: float | None
    e2e_p50_s: float | None


@dataclass(frozen=True, slots=True)
class FaultOutcome:
    index: int
    kind: str
    at_s: float  # injected, from the level's start
    fault_s: float
    injected: bool
    detail: str
    failed: int
    failed_by_type: dict[str, int]
    recovery_s: float | None
    before: LatencyWindow
    during: LatencyWindow
    after: LatencyWindow
    requests_hit: int | None = None  # summaries written before it was counted: None


@dataclass(frozen=True, slots=True)
class DrillSummary:
    scenario: str
    level_start_ns: int  # on the run's clock: the level's ``at_s`` count from here
    compare_window_s: float
    faults: tuple[FaultOutcome, ...]
    audit: RequestAudit
    # Requests of the level by status and by error type, the drill's whole story in counts.
    statuses: dict[str, int]
