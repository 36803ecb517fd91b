"""The report blocks of a serving run: levels, latency distributions, the timeline,
throughput, errors, and the blocks of its kind (serving_modes.py, drill, soak, MTP A/B,
telemetry, workload)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from moeperf.collectors.latency import itl_samples_s, per_request
from moeperf.collectors.serving_records import NO_SLO, ScenarioSummary, ServingSummary, Slo
from moeperf.collectors.summary import summarize_requests
from moeperf.collectors.target_counters import metrics_unavailable
from moeperf.reports.accel_blocks import accelerator_blocks
from moeperf.reports.deploy_sweep_blocks import deploy_sweep_blocks
from moeperf.reports.drill_blocks import drill_blocks
from moeperf.reports.elastic_blocks import elastic_blocks
from moeperf.reports.figures.cdf import CURVE_COLUMNS, cdf_curves, curve_frame, latency_cdf
from moeperf.reports.figures.concurrency import concurrency_curve, levels_frame
from moeperf.reports.figures.errors import error_bars, error_counts
from moeperf.reports.figures.interactivity import (
    has_numbers,
    interactivity_chart,
    interactivity_frame,
)
from moeperf.reports.figures.percentiles import percentile_frame, percentile_table
from moeperf.reports.figures.prefill import prefill_frame, prefill_throughput, prompt_tokens
from moeperf.reports.figures.timeline import scenario_starts, timeline, timeline_frame
from moeperf.reports.mtp_ab_blocks import mtp_ab_blocks
from moeperf.reports.render import (
    Chart,
    Table,
)
from moeperf.reports.runs import RunData, resolved_spec
from moeperf.reports.server_latency_blocks import server_latency_table
from moeperf.reports.serving_modes import capacity_blocks, interference_blocks, sweep_blocks
from moeperf.reports.soak_blocks import soak_blocks
from moeperf.reports.target_counters import target_counters_table
from moeperf.reports.workload_blocks import workload_blocks

CDF_POINTS = 1000
# Requests per slice of the per-request derivations: ~500k chunks, so their int64
# temporaries stay ~40 MB (32k requests took ~160 MB at the peak of a 1M-request report).
BATCH = 8_192
GIB = 2**30


def _slo(run: RunData) -> Slo:
    slo = resolved_spec(run).get("slo") or {}
    return Slo(**{k: slo.get(k) for k in ("ttft_s", "tpot_s", "e2e_s")}) if slo else NO_SLO


def _scenarios(run: RunData) -> dict[str, ScenarioSummary]:
    """The per-scenario summary: the run's own summary.json, else computed the same way."""
    if isinstance(run.summary, ServingSummary) and run.summary.scenarios:
        return run.summary.scenarios
    return summarize_requests(run.requests, _slo(run)).scenarios if len(run.requests) else {}


def _levels_table(scenarios: Mapping[str, ScenarioSummary], *, answers: bool) -> Table:
    rows = [
        {
            "scenario": name,
            "requests": e.requests,
            "ok": e.ok,
            "errors": e.errors,
            "cancelled": e.cancelled,
            "excluded (warm-up, cool-down)": f"{e.excluded_warmup}, {e.excluded_cooldown}",
            "window s": e.window_s,
            "output tok/s": e.output_throughput_tok_s,
            "requests/s": e.request_throughput_rps,
            "goodput req/s": e.goodput_rps,
            "goodput ratio": e.goodput_ratio,
        }
        for name, e in scenarios.items()
    ]
    return Table(
        pd.DataFrame(rows),
        "Per load level, measured requests only (warm-up and cool-down excluded); "
        "goodput counts ok requests meeting every SLO of the spec.",
        answers=answers,
    )


def _saturation_table(scenarios: Mapping[str, ScenarioSummary]) -> Table | None:
    """Each open-loop level's three signs of over-saturation and the verdict."""
    rows = [
        {
            "scenario": name,
            "over-saturated": "yes" if s.over_saturated else "no",
            "arrivals/s": s.arrivals_per_s,
            "completions/s": s.completions_per_s,
            "in flight, per s": f"{s.in_flight.per_s:+.2f} ± {s.in_flight.margin:.2f}",
            "TTFT, ms per s": f"{s.ttft.per_s * 1e3:+.1f} ± {s.ttft.margin * 1e3:.1f}",
        }
        for name, entry in scenarios.items()
        if (s := entry.saturation) is not None
    ]
    if not rows:
        return None
    return Table(
        pd.DataFrame(rows),
        "Open-loop levels: an over-saturated level shows all three signs, completions "
        "short of arrivals, requests in flight growing and TTFT rising (slopes with their "
        "99% margins; see Metric definitions). Its latencies measure a growing queue.",
    )


def _harness_error_table(scenarios: Mapping[str, ScenarioSummary]) -> Table | None:
    rows = []
    for name, entry in scenarios.items():
        errors = entry.harness_error_s
        if errors is None:
            continue
        row: dict[str, Any] = {"scenario": name, "matched": errors.matched_requests}
        for described, label in (
            (errors.ttft_total, "TTFT total error"),
            (errors.send, "send side"),
            (errors.ttft, "receive side"),
            (errors.e2e_total, "E2E total error"),
            (errors.chunk, "chunk error"),
        ):
            for q in (0.5, 0.99):
                estimate = described.at(q)
                if estimate is not None:
                    row[f"{label} {estimate.label} ms"] = estimate.value * 1e3
        rows.append(row)
    if not rows:
        return None
    return Table(
        pd.DataFrame(rows),
        "The harness's own measurement error against the synthetic target's own stamps: "
        "TTFT total is the client's TTFT minus the server's received-to-first-write, the "
        "send side (intended send to received) plus the receive side (first write to "
        "first chunk read); E2E total likewise to the response's end.",
    )


def _batches(requests: pd.DataFrame) -> list[pd.DataFrame]:
    """``requests`` in slices of ``BATCH`` rows. Every derivation used here is per request,
    so slicing changes no result, only the size of the temporaries (a run of a million
    requests holds ~60M chunk timestamps)."""
    return [requests.iloc[start : start + BATCH] for start in range(0, len(requests), BATCH)]


def _per_request(requests: pd.DataFrame) -> pd.DataFrame:
    """``collectors.latency.per_request``, slice by slice."""
    parts = [per_request(part) for part in _batches(requests)]
    return pd.concat(parts) if len(parts) > 1 else per_request(requests)


def _itl_samples(requests: pd.DataFrame) -> np.ndarray:
    """``collectors.latency.itl_samples_s`` values, slice by slice, as float32."""
    parts = [itl_samples_s(part)["itl_s"].to_numpy(np.float32) for part in _batches(requests)]
    return np.concatenate(parts) if parts else np.empty(0, np.float32)


ITL_COLUMNS = ("request_id", "scenario", "status", "chunk_ns", "chunk_tokens")


def _itl_curves(requests: pd.DataFrame, keep: pd.Series) -> pd.DataFrame:
    """ITL CDF points per scenario, one scenario's samples in memory at a time."""
    # Only the columns the ITL derivation reads: a row selection copies every column.
    chosen = requests.loc[keep, list(ITL_COLUMNS)]
    parts = [
        curve_frame(str(scenario), _itl_samples(chosen.iloc[rows]), CDF_POINTS)
        for scenario, rows in chosen.groupby("scenario", sort=False).indices.items()
    ]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=CURVE_COLUMNS)


def _mode_blocks(
    summary: ServingSummary, scenarios: Mapping[str, ScenarioSummary], requests: pd.DataFrame
) -> list[Chart | Table]:
    """The blocks of the run's kind; the first of each answers its question."""
    blocks: list[Chart | Table] = []
    if summary.capacity is not None:
        blocks += capacity_blocks(summary.capacity, scenarios)
    if summary.sweep is not None:
        blocks += sweep_blocks(summary.sweep, scenarios)
    if summary.interference is not None:
        blocks += interference_blocks(summary.interference, scenarios)
    if summary.mtp_ab is not None:
        blocks += mtp_ab_blocks(summary.mtp_ab)
    if summary.deploy_sweep is not None:
        blocks += deploy_sweep_blocks(summary.deploy_sweep)
    if summary.elastic is not None:
        blocks += elastic_blocks(summary.elastic)
    if summary.drill is not None:
        blocks += drill_blocks(summary.drill, requests)
    if summary.soak is not None:
        blocks += soak_blocks(summary.soak)
    return blocks


def serving_blocks(run: RunData) -> list[Chart | Table]:
    requests = run.requests
    if requests.empty:
        return [Table(pd.DataFrame({"requests": [0]}), "The run has no request records.")]
    metrics = _per_request(requests)
    scenarios = _scenarios(run)
    summary = run.summary if isinstance(run.summary, ServingSummary) else None
    mode = _mode_blocks(summary, scenarios, requests) if summary is not None else []
    # The page answers first what the run's kind asks (the capacity, the A/B's verdicts,
    # the drill's recovery, the soak's verdicts...); a plain run's answer is its curve.
    # An A/B's blocks are arms at one level, not a load curve; one level is a point, not
    # a trade-off: neither gets the curve (a plain run of one level is answered by its
    # levels' table).
    # A sweep's levels are several arms' curves: its own chart draws them apart.
    arms = summary is not None and (summary.mtp_ab or summary.deploy_sweep) is not None
    curve = not arms and len(scenarios) >= 2
    curve_answers = not any(block.answers for block in mode)
    blocks: list[Chart | Table] = [_levels_table(scenarios, answers=curve_answers and not curve)]
    if curve:
        blocks.append(
            Chart(
                concurrency_curve(levels_frame(scenarios)),
                "One point per load level; ringed points are on the Pareto front (higher "
                "throughput, lower latency).",
                drawn_by=("concurrency",),
                answers=curve_answers,
            )
        )
    # A capacity run's probes are its levels.
    interactivity = interactivity_frame(scenarios)
    if curve and has_numbers(interactivity).sum() >= 2:
        blocks.append(
            Chart(
                interactivity_chart(interactivity),
                "One point per load level: its total output tokens/s (x) and the output "
                "tokens/s each user sees, 1 / TPOT p50 with its 95% interval (y; dashed: "
                "1 / TPOT p99). Ringed points are the operating points worth choosing: "
                "no other level is faster per user without losing total throughput. "
                "Hollow grey points are levels that failed or are invalid.",
                drawn_by=("interactivity",),
            )
        )
    saturation = _saturation_table(scenarios)  # after the curve: its levels' caveat
    if saturation is not None:
        blocks.append(saturation)
    latency = [
        (name, label, described)
        for name, entry in scenarios.items()
        for label, described in entry.latency_s.labelled()
    ]
    blocks.append(
        Chart(
            percentile_table(percentile_frame(latency)),
            "Percentiles from raw samples with their sample counts and 95% confidence "
            "intervals (see Metric definitions).",
            drawn_by=("percentiles",),
        )
    )
    blocks += mode
    if summary is not None and summary.telemetry is not None:
        figures = summary.accelerator_levels()
        blocks += accelerator_blocks(summary.telemetry, figures, run.accelerator)
    repeats = summary.repeats if summary is not None else ()
    blocks += workload_blocks(ServingSummary(scenarios=scenarios, repeats=repeats), requests)
    counters = target_counters_table(scenarios, metrics_unavailable(run.server_metrics))
    if counters is not None:
        blocks.append(counters)
    server = server_latency_table(scenarios)  # the target's own latency histograms (vLLM)
    if server is not None:
        blocks.append(server)
    keep = (metrics["phase"] == "measure") & (metrics["status"] == "ok")
    measured = metrics[keep]
    curves = {
        "TTFT": cdf_curves(measured, "ttft_s", CDF_POINTS),
        "TPOT": cdf_curves(measured, "tpot_s", CDF_POINTS),
        "ITL": _itl_curves(requests, keep),
        "E2E": cdf_curves(measured, "e2e_s", CDF_POINTS),
    }
    for label, frame in curves.items():
        caption = f"{label} of ok measured requests, per scenario."
        blocks.append(Chart(latency_cdf(frame, label), caption, drawn_by=("cdf",)))
    blocks.append(
        Chart(
            timeline(timeline_frame(requests, metrics["ttft_s"]), scenario_starts(requests)),
            "The whole run, warm-up and cool-down included.",
            drawn_by=("timeline",),
        )
    )
    prefill = prefill_frame(measured["scenario"], prompt_tokens(requests)[keep], measured["ttft_s"])
    blocks.append(
        Chart(
            prefill_throughput(prefill),
            "Prompt tokens / TTFT: a prefill throughput where prefill dominates TTFT.",
            drawn_by=("prefill",),
        )
    )
    harness = _harness_error_table(scenarios)
    if harness is not None:
        blocks.append(harness)
    counts = error_counts(requests)
    if not counts.empty:
        caption = "Failed and cancelled requests, all phases."
        blocks.append(Chart(error_bars(counts), caption, drawn_by=("errors",)))
        blocks.append(Table(counts, "Failed and cancelled requests by type, with a message."))
    return blocks
