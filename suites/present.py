"""Presenting runs in the terminal with rich: progress while running, tables after."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from moeperf.collectors.serving_records import ScenarioSummary, ServingSummary
from moeperf.collectors.store import RunWriter
from moeperf.collectors.units import ms_text
from moeperf.suites.run_options import Progress as RunProgress

if TYPE_CHECKING:
    from moeperf.suites.serving.level_plan import LevelOutcome


@dataclass(frozen=True, slots=True)
class ErrorBudget:
    """How far the harness's median total TTFT error and its ITL error may be from the
    server's own times."""

    ttft_p50_s: float
    itl_p50_s: float


class ProgressBar(RunProgress):
    """A bar per load level: time through the level, requests done and failed; the bars
    stay on the screen after the run with ``keep`` (a level's failure is said either way)."""

    def __init__(self, console: Console, *, keep: bool = True):
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[done]} done, {task.fields[failed]} failed"),
            TimeElapsedColumn(),
            console=console,
            transient=not keep,
        )
        self._task: TaskID | None = None  # the current level's bar
        self._started = 0.0
        self._console = console

    def level_started(self, scenario: str, duration_s: float) -> None:
        if self._task is None:
            self._progress.start()
        self._task = self._progress.add_task(scenario, total=duration_s, done=0, failed=0)
        self._started = time.monotonic()

    def finished(self, status: str) -> None:
        task = self._progress.tasks[-1]
        failed = task.fields["failed"] + (status == "error")
        self._progress.update(task.id, done=task.fields["done"] + 1, failed=failed)
        self.tick()

    def tick(self) -> None:
        if self._task is not None:
            self._progress.update(self._task, completed=time.monotonic() - self._started)

    def level_done(self, outcome: LevelOutcome) -> None:
        task = self._progress.tasks[-1]
        self._progress.update(task.id, completed=task.total)
        if outcome.verdict.status == "failed":
            line = f"{outcome.scenario}: failed: {outcome.verdict.reason}"
            self._console.print(Text(line, style="red"))
        for reason in outcome.invalid_reasons:
            line = f"{outcome.scenario}: client bottleneck: {reason}"
            self._console.print(Text(line, style="yellow"))

    def close(self) -> None:
        if self._task is not None:
            self._progress.stop()


def announce_run(run: RunWriter, console: Console) -> None:
    """Say where a run's results go, before any load is sent."""
    console.print(f"run {run.run_id} -> {run.directory}", markup=False, highlight=False)


def harness_error_table(summary: ServingSummary, budget: ErrorBudget) -> Table:
    """The harness's own TTFT, E2E and ITL error against the synthetic server's own stamps:
    the total, and its send and receive sides (MeasurementErrors)."""
    table = Table(
        title="harness measurement error vs the server's own stamps (ms)",
        caption=(
            "TTFT total: the client's TTFT - the server's received-to-first-write = send "
            "(intended send -> received) + receive (first write -> first chunk read); E2E "
            "total likewise to the response's end"
        ),
    )
    columns = (
        "load",
        "matched",
        "TTFT total p50",
        "TTFT total p99",
        "send p50",
        "receive p50",
        "E2E total p50",
        "ITL p50",
        "ITL p99",
        "loop lag p99",
        "client CPU",
        "verdict",
    )
    for column in columns:
        table.add_column(column, justify="right")
    for scenario, entry in summary.scenarios.items():
        errors = entry.harness_error_s
        if errors is None:
            continue
        lag = max(h.selfwatch.loop_lag_p99_s for h in entry.harness)
        cpu = max(h.selfwatch.cpu_fraction for h in entry.harness)
        verdict = calibration_verdict(entry, budget)
        table.add_row(
            scenario,
            str(errors.matched_requests),
            ms_text(errors.ttft_total.value_at(0.5), 3),
            ms_text(errors.ttft_total.value_at(0.99), 3),
            ms_text(errors.send.value_at(0.5), 3),
            ms_text(errors.ttft.value_at(0.5), 3),
            ms_text(errors.e2e_total.value_at(0.5), 3),
            ms_text(errors.itl.value_at(0.5), 3),
            ms_text(errors.itl.value_at(0.99), 3),
            ms_text(lag, 3),
            f"{cpu:.0%}",
            verdict,
        )
    return table


def calibration_verdict(entry: ScenarioSummary, budget: ErrorBudget) -> str:
    """ "within budget", "over budget" or "invalid: ..." for one calibration level."""
    if entry.client_bottleneck:
        return "invalid (client-bound)"
    errors = entry.harness_error_s
    if errors is None or not errors.ttft_total.count:
        return "no samples"
    ttft_p50 = errors.ttft_total.value_at(0.5) or 0.0
    itl_p50 = errors.itl.value_at(0.5) or 0.0  # no ITL samples: no error to speak of
    if abs(ttft_p50) <= budget.ttft_p50_s and abs(itl_p50) <= budget.itl_p50_s:
        return "within budget"
    return "over budget"
