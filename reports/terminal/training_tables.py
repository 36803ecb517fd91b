"""The training suite's tables (rich), from a run's summary (``TrainingSummary``).

Presenting only: every number is a summary field, scaled. A value that was not measured
prints as "n/a", never as zero.
"""

from __future__ import annotations

from collections.abc import Iterable

from rich.table import Table

from moeperf.collectors.store import RunReader
from moeperf.collectors.training_summary import (
    BudgetCalibration,
    SimulatorCheck,
    TrainingScenarioSummary,
    TrainingSummary,
)
from moeperf.reports.terminal.presentation import Presentation

MIB = 2**20


def _num(value: float | None, spec: str = ".1f", scale: float = 1.0) -> str:
    return "n/a" if value is None else format(value * scale, spec)


def _has_sizes(scenarios: Iterable[TrainingScenarioSummary]) -> bool:
    return any(e.size for e in scenarios)


def policy_skew_table(summary: TrainingSummary) -> Table:
    """Per scenario (policy x skew [x size]): OOMs, throughput, MFU, memory, deciding."""
    scenarios = summary.scenarios
    sized = _has_sizes(scenarios.values())
    table = Table(title="Training: OOM rate and effective throughput per policy and skew")
    heads = ["policy", "skew", *(["size"] if sized else []), "steps", "OOMs / attempts",
             "OOM rate", "restarts", "time lost s", "effective tok/s", "tok/s", "MFU p50",
             "peak p50 MiB", "peak max MiB", "budget MiB", "deciding s"]  # fmt: skip
    for name in heads:
        label = name in ("policy", "skew", "size")
        table.add_column(name, justify="left" if label else "right", no_wrap=label)
    for e in scenarios.values():
        peak = e.peak_memory_bytes
        budget = e.budget_bytes
        table.add_row(
            e.policy,
            e.skew,
            *([e.size] if sized else []),
            str(e.steps) + (" (stopped)" if e.stopped else ""),
            f"{e.ooms} / {e.step_attempts}",
            _num(e.oom_rate, ".1%"),
            str(e.restarts),
            _num(e.time_lost_s, ".1f"),
            _num(e.effective_tokens_per_s, ".0f"),
            _num(e.tokens_per_s, ".0f"),
            _num(e.mfu_p50, ".1%"),
            _num(peak.p50, ".1f", 1 / MIB),
            _num(peak.max, ".1f", 1 / MIB),
            "none" if budget is None else _num(budget, ".1f", 1 / MIB),
            _num(e.decide_s, ".3f"),
        )
    table.caption = (
        "OOM rate = OOM events / step attempts; effective tok/s = tokens of completed steps / "
        "scenario wall time (restarts, replays, checkpoint writes included); tok/s = tokens / "
        "step time of successful steps; time lost = work thrown away by each OOM + reload; "
        "(stopped): ended early after trainer.max_ooms OOMs." + _budget_caption(summary.budgets)
    )
    return table


def _budget_caption(budgets: dict[str, BudgetCalibration]) -> str:
    parts = [
        (f"{size}: " if size else "")
        + f"{b.ratio:g} x {b.calibration_peak_bytes / MIB:.1f} MiB (keep-all/calm peak) "
        f"= {b.budget_bytes / MIB:.1f} MiB"
        for size, b in budgets.items()
    ]
    return (" Budget: " + "; ".join(parts) + ".") if parts else ""


def mfu_table(summary: TrainingSummary) -> Table:
    """Per policy and model size: tokens/s and MFU against the run's peak FLOP/s."""
    peak = summary.peak_flops
    table = Table(title="Training: model FLOPs utilization per policy and model size")
    for name in ("policy", "size", "skew", "steps", "tok/s", "MFU p50"):
        label = name in ("policy", "size", "skew")
        table.add_column(name, justify="left" if label else "right", no_wrap=label)
    for e in summary.scenarios.values():
        table.add_row(
            e.policy,
            e.size or "-",
            e.skew,
            str(e.steps),
            _num(e.tokens_per_s, ".0f"),
            _num(e.mfu_p50, ".2%"),
        )
    table.caption = (
        f"peak {_num(peak.flops_per_s, '.1f', 1e-9)} GFLOP/s, {peak.source}; "
        "MFU = model FLOPs (6 x active parameters per token + attention, recompute not "
        "counted) / (step time x peak)."
    )
    return table


def simulator_table(check: SimulatorCheck) -> Table:
    """Per scenario: the cluster simulator's prediction (configured as this trainer)
    beside the measurement, and the error against its tolerance."""
    table = Table(title="Training: cluster simulator (simulated) against the trainer (measured)")
    paired = any(p.measured_step_s_paired is not None for p in check.scenarios.values())
    heads = ["scenario", "step s sim", "step s measured", *(["paired s"] if paired else []),
             "step error", *(["95% CI"] if paired else []), "peak MiB sim",
             "peak MiB measured", "peak error", "OOMs sim / measured"]  # fmt: skip
    for name in heads:
        table.add_column(name, justify="left" if name == "scenario" else "right", no_wrap=True)
    for name, p in check.scenarios.items():
        table.add_row(
            name + (" (fitted)" if p.fitted else ""),
            _num(p.predicted_step_s_p50, ".3f"),
            _num(p.measured_step_s_p50, ".3f"),
            *([_num(p.measured_step_s_paired, ".3f")] if paired else []),
            _within(p.step_error, check.step_tolerance),
            *([_interval(p.step_error_ci)] if paired else []),
            _num(p.predicted_peak_bytes, ".1f", 1 / MIB),
            _num(p.measured_peak_bytes, ".1f", 1 / MIB),
            _within(p.peak_error, check.peak_tolerance),
            f"{p.predicted_ooms} / {p.measured_ooms}",
        )
    efficiency = "; ".join(
        f"{size or 'model'} {e:.1%} of peak ({check.fitted_on[size]})"
        for size, e in check.efficiency.items()
    )
    skipped = "".join(
        f" {name}: not predicted, {why}." for name, why in check.not_predicted.items()
    )
    pairing = (
        "paired = the step at the fitted scenario's pace (scenarios ran interleaved: its "
        "median x the median ratio of the two scenarios' steps in the same rounds), what "
        "the step error is taken against, its 95% CI a bootstrap over the rounds; "
        if paired
        else ""
    )
    table.caption = (
        "step = median step time of successful steps; "
        + pairing
        + "peak = highest step peak; error = "
        f"predicted / measured - 1, * past the tolerance (step {check.step_tolerance:.0%}, "
        f"peak {check.peak_tolerance:.0%}). Fitted efficiency: {efficiency}; (fitted): that "
        "scenario's own steps set it, not a prediction." + skipped
    )
    return table


def _interval(interval: tuple[float, float] | None) -> str:
    return "n/a" if interval is None else f"{interval[0]:+.1%} to {interval[1]:+.1%}"


def _within(error: float | None, tolerance: float) -> str:
    if error is None:
        return "n/a"
    return f"{error:+.1%}" + ("" if abs(error) <= tolerance else " *")


def training_tables(summary: TrainingSummary) -> list[Table]:
    """The tables of a training run's summary: MFU first for an MFU run; the simulator's
    check last, where the run has one."""
    if not summary.scenarios:
        return []
    tables = [policy_skew_table(summary)]
    if summary.kind == "mfu":
        tables.insert(0, mfu_table(summary))
    if summary.simulator is not None and summary.simulator.scenarios:
        tables.append(simulator_table(summary.simulator))
    return tables


def training_lines(summary: TrainingSummary, reader: RunReader) -> Presentation:
    """What ``moeperf runs show`` prints of a training run: its tables are the answer
    (MFU first for an MFU run), the accelerators per scenario detail."""
    shown = Presentation(answer=training_tables(summary))
    if summary.telemetry is not None:
        from moeperf.reports.terminal.telemetry_tables import telemetry_lines

        figures = {name: entry.accelerator for name, entry in summary.scenarios.items()}
        shown += telemetry_lines(summary.telemetry, figures, training=True)
    return shown
