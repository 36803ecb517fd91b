"""How a serving run that ran to its end is concluded: one status and its reason, from its
levels' verdicts and what its kind adds (a capacity search, a drill, a soak, the request
audit, MTP A/B's output equality), then written to the run once, here."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from moeperf.suites.serving.load.validity import run_verdict

if TYPE_CHECKING:
    from moeperf.collectors.store import RunWriter
    from moeperf.suites.serving.level_plan import LevelOutcome

EndStatus = Literal["complete", "failed", "invalid"]
_ENDS: dict[str, EndStatus] = {"complete": "complete", "failed": "failed", "invalid": "invalid"}


@dataclass(frozen=True, slots=True)
class Verdict:
    """A run's status at its end, and why (None when complete)."""

    status: EndStatus
    reason: str | None = None


def as_verdict(status: str, reason: str | None) -> Verdict:
    """A status and reason from the rules that judge a run (levels, capacity, drill, soak)
    as a verdict; a status a run cannot end with after running (running, aborted) is a
    bug here, not the user's."""
    end = _ENDS.get(status)
    if end is None:
        raise AssertionError(f"a run that ran to its end cannot be {status!r}")
    return Verdict(end, reason)


def levels_verdict(outcomes: Iterable[LevelOutcome]) -> Verdict:
    """The verdict of a run's levels: failed if one failed, else invalid if one was
    client-bound, else complete (suites/serving/load/validity.py has the rule)."""
    return as_verdict(*run_verdict([o.verdict for o in outcomes]))


def conclude(run: RunWriter, verdict: Verdict, warn_only: bool) -> None:
    """End ``run`` as ``verdict`` says (a complete run ends complete when its block exits);
    with ``--warn-only`` a run that did not complete says its command exits 0 anyway."""
    if verdict.status != "complete" and warn_only:
        run.add_note(
            f"--warn-only: the run ended {verdict.status}, and the command exits 0 all the "
            "same; only its ok levels are sound results"
        )
    if verdict.status == "failed":
        run.fail(verdict.reason or "")
    elif verdict.status == "invalid":
        run.invalidate(verdict.reason or "")
