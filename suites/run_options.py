"""What a command asks of any suite's run beside its spec: one record, so that every suite's
run function is called the same way (moeperf/registry.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from moeperf.collectors.store import RunWriter
    from moeperf.suites.serving.level_plan import LevelOutcome

Say = Callable[[str], None]


class Progress:
    """What a serving run tells its caller as it goes (the CLI draws a progress bar)."""

    def level_started(self, scenario: str, duration_s: float) -> None: ...
    def finished(self, status: str) -> None: ...
    def tick(self) -> None: ...
    def level_done(self, outcome: LevelOutcome) -> None: ...


def _quiet(_line: str) -> None:
    pass


def _unannounced(_run: RunWriter) -> None:
    pass


@dataclass(frozen=True)
class RunOptions:
    """How a run reports and exports, whatever its suite; a suite uses what it has."""

    # Called once the run's directory exists (the CLI prints its id and path).
    on_started: Callable[[RunWriter], None] = _unannounced
    # Plain lines as the run goes (no markup: text from a spec or a target shows as written).
    say: Say = _quiet
    # Final metrics pushed here (never stored in the run); suites without an export ignore it.
    pushgateway_url: str | None = None
    # A serving run's levels as they go.
    progress: Progress | None = None
    # A serving run whose levels failed or were invalid still ends 'failed'/'invalid', but
    # says that its exit code is 0 (the CLI decides the code).
    warn_only: bool = False
