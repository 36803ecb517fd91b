"""The HTML report of one or more runs: figures chosen by run kind, rendered as one page.

``moeperf report RUN...`` calls ``report_command``; ``build_report`` is the pure part
(runs in, HTML out). Metrics come from ``collectors`` (per-request latencies, ITL samples,
the summary); this module only picks what to show for a serving, training or micro run.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from moeperf.collectors.accuracy_records import AccuracySummary
from moeperf.collectors.capacity_records import CapacitySummary
from moeperf.collectors.dist_training_summary import DEFINITIONS as DIST_DEFINITIONS
from moeperf.collectors.dist_training_summary import DistTrainingSummary
from moeperf.collectors.errors import CollectorError
from moeperf.collectors.interference_records import InterferenceSummary, interference_rows
from moeperf.collectors.latency import itl_samples_s, per_request
from moeperf.collectors.quantiles import QuantileEstimate
from moeperf.collectors.serving_records import NO_SLO, ScenarioSummary, ServingSummary, Slo
from moeperf.collectors.simulation_summary import SimulationSummary
from moeperf.collectors.store import RunStore
from moeperf.collectors.summary import summarize_requests
from moeperf.collectors.sweep_plan_compare import plan_comparison
from moeperf.collectors.sweep_records import SweepSummary, fit_answer
from moeperf.collectors.target_counters import metrics_unavailable
from moeperf.collectors.training_summary import SimulatorCheck, TrainingSummary
from moeperf.reports.accel_blocks import accelerator_blocks
from moeperf.reports.accuracy_blocks import accuracy_blocks
from moeperf.reports.appendix import appendix_html
from moeperf.reports.drill_blocks import drill_blocks
from moeperf.reports.errors import ReportUsageError
from moeperf.reports.figures.capacity import capacity_probes
from moeperf.reports.figures.cdf import CURVE_COLUMNS, cdf_curves, curve_frame, latency_cdf
from moeperf.reports.figures.cluster_sim import (
    ablation_frame,
    memory_chart,
    oom_rate_chart,
    policy_chart,
    reproduction_frame,
    scenario_frame,
)
from moeperf.reports.figures.concurrency import concurrency_curve, levels_frame
from moeperf.reports.figures.dist_training import (
    layout_frame,
    link_frame,
    rank_frame,
    recovery_frame,
    time_split_chart,
)
from moeperf.reports.figures.errors import error_bars, error_counts
from moeperf.reports.figures.expert_load import expert_load_heatmap, policy_matrices
from moeperf.reports.figures.interactivity import (
    has_numbers,
    interactivity_chart,
    interactivity_frame,
)
from moeperf.reports.figures.interference import chunk_label, interference_chart
from moeperf.reports.figures.memory import peak_memory
from moeperf.reports.figures.micro import micro_distributions, micro_summary
from moeperf.reports.figures.percentiles import percentile_frame, percentile_table
from moeperf.reports.figures.prefill import prefill_frame, prefill_throughput, prompt_tokens
from moeperf.reports.figures.simulator_check import simulator_chart, simulator_frame
from moeperf.reports.figures.steps import event_table, policies, step_table
from moeperf.reports.figures.sweep import sweep_chart, sweep_frame, sweep_table_frame
from moeperf.reports.figures.timeline import scenario_starts, timeline, timeline_frame
from moeperf.reports.figures.training_events import training_timeline
from moeperf.reports.figures.training_throughput import policy_throughput, policy_throughput_frame
from moeperf.reports.mtp_ab_blocks import mtp_ab_blocks
from moeperf.reports.page_path import choose_page_path, several_runs_name
from moeperf.reports.render import (
    Chart,
    Details,
    Section,
    Table,
    pretty_json,
    render_page,
    write_page,
)
from moeperf.reports.request_view import request_facts
from moeperf.reports.runs import RunData, load_run
from moeperf.reports.soak_blocks import soak_blocks
from moeperf.reports.target_counters import target_counters_table
from moeperf.reports.workload_blocks import workload_blocks

# Points per CDF curve in the page: 4 metrics x 8 levels x 1,000 points keeps the data
# well under the size of plotly.js itself.
CDF_POINTS = 1000
# Requests per slice of the per-request derivations: ~500k chunks, so their int64
# temporaries stay ~40 MB (32k requests took ~160 MB at the peak of a 1M-request report).
BATCH = 8_192
GIB = 2**30


def _spec(run: RunData) -> dict[str, Any]:
    return run.manifest.spec_resolved or run.manifest.spec_given or {}


def _host_line(host: Mapping[str, Any]) -> str:
    parts = [str(host.get("cpu_model", "unknown CPU"))]
    if host.get("usable_cores") or host.get("logical_cores"):
        parts.append(f"{host.get('usable_cores') or host.get('logical_cores')} cores")
    if host.get("memory_bytes"):
        parts.append(f"{host['memory_bytes'] / GIB:.0f} GiB")
    gpus = host.get("gpus") or []
    if gpus:
        names = ", ".join(str(g.get("name", "GPU")) for g in gpus)
        driver = gpus[0].get("driver_version")
        parts.append(f"GPUs: {names}" + (f" (driver {driver})" if driver else ""))
    else:
        parts.append("no GPU")
    return "; ".join(parts)


def _facts(run: RunData) -> list[tuple[str, str]]:
    m = run.manifest
    spec, target = _spec(run), m.target or {}
    facts = [("run", m.run_id), ("suite", m.suite)]
    for label, value in (
        ("spec", spec.get("name")),
        ("description", spec.get("description")),
        ("target kind", target.get("kind")),
        ("target URL", target.get("url")),
        ("model", target.get("model")),
        ("API", target.get("api")),
        ("engine version", target.get("engine_version") or target.get("engine")),
        (
            "simulated",
            "yes: latencies are configured, not a model's" if target.get("simulated") else None,
        ),
        ("started", m.anchor_wall_time),
        ("ended", m.ended_wall_time),
        ("moeperf git SHA", m.git_sha),
        ("host", _host_line(m.host or {})),
    ):
        if value not in (None, ""):
            facts.append((label, str(value)))
    # What every request asked of the target: sampling decides throughput.
    facts += request_facts(m)
    return facts


def _condition_line(run: RunData) -> str:
    m, target = run.manifest, run.manifest.target or {}
    where = " ".join(str(v) for v in (target.get("kind"), target.get("url")) if v)
    parts = [f"run {m.run_id}", f"target {where or 'unknown'}"]
    if target.get("model"):
        parts.append(f"model {target['model']}")
    if target.get("engine_version"):
        parts.append(f"engine {target['engine_version']}")
    parts.append(f"status {m.status}")
    return " · ".join(parts)


def _details(run: RunData) -> list[Details]:
    m = run.manifest
    return [
        Details("spec as resolved", pretty_json(m.spec_resolved)),
        Details("spec as given", pretty_json(m.spec_given)),
        Details("target", pretty_json(m.target)),
        Details("host fingerprint", pretty_json(m.host)),
    ]


# --- serving ---------------------------------------------------------------------------


def _slo(run: RunData) -> Slo:
    slo = _spec(run).get("slo") or {}
    return Slo(**{k: slo.get(k) for k in ("ttft_s", "tpot_s", "e2e_s")}) if slo else NO_SLO


def _scenarios(run: RunData) -> dict[str, ScenarioSummary]:
    """The per-scenario summary: the run's own summary.json, else computed the same way."""
    if isinstance(run.summary, ServingSummary) and run.summary.scenarios:
        return run.summary.scenarios
    return summarize_requests(run.requests, _slo(run)).scenarios if len(run.requests) else {}


def _levels_table(scenarios: Mapping[str, ScenarioSummary]) -> Table:
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
    )


def _harness_error_table(scenarios: Mapping[str, ScenarioSummary]) -> Table | None:
    rows = []
    for name, entry in scenarios.items():
        errors = entry.harness_error_s
        if errors is None:
            continue
        row: dict[str, Any] = {"scenario": name, "matched": errors.matched_requests}
        for described, label in ((errors.ttft, "TTFT error"), (errors.chunk, "chunk error")):
            for q in (0.5, 0.99):
                estimate = described.at(q)
                if estimate is not None:
                    row[f"{label} {estimate.label} ms"] = estimate.value * 1e3
        rows.append(row)
    if not rows:
        return None
    return Table(
        pd.DataFrame(rows),
        "The harness's own measurement error against the synthetic target's write times.",
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


def _capacity_blocks(
    capacity: CapacitySummary, scenarios: Mapping[str, ScenarioSummary]
) -> list[Chart | Table]:
    """The capacity search: its answer and probes as a table, and the probes' chart."""
    unit = capacity.unit
    verdicts = {True: "held", False: "failed", None: "not judged"}
    rows = [
        {
            "probe": number,
            unit: probe.level,
            "scenario": probe.scenario,
            "phase": probe.phase,
            "SLOs": verdicts[probe.passed],
            "why": probe.reason,
        }
        for number, probe in enumerate(capacity.probes, start=1)
    ]
    caption = (
        f"Capacity for {capacity.criteria}: {capacity.answer()} (search {capacity.status}). "
        "Bracketing "
        "from the start level by the growth factor, then bisection; each probe is one "
        "load level of this run, judged on its point estimates (p99: numpy linear "
        "quantile of the level's measured ok requests; goodput ratio: ok requests "
        "meeting [slo] / measured requests), each with its 95% interval."
    )
    return [
        Table(pd.DataFrame(rows), caption),
        Chart(
            capacity_probes(capacity, scenarios),
            "Each point is a probe (its number in the search); the dashed line is the "
            "limit; the shaded band is where the capacity lies.",
            drawn_by=("capacity",),
        ),
    ]


def _sweep_blocks(
    sweep: SweepSummary, scenarios: Mapping[str, ScenarioSummary]
) -> list[Chart | Table]:
    """The sweep over prompt lengths: a row per (length, level), and its four panels."""
    limit = (
        f"context limit {sweep.context_tokens} tokens ({sweep.context_source})"
        if sweep.context_tokens is not None
        else "context limit not stated by the target"
    )
    caption = (
        f"Sweep over prompt lengths ({limit}; up to {sweep.max_output_tokens} output tokens "
        "per request; lengths that do not fit it were not sent): prefill tok/s is prompt "
        "tokens / TTFT p50 per request, its 95% interval the TTFT p50's inverted, and total "
        "prompt tok/s is prompt tokens x ok measured requests / the measured window."
    )
    frame = sweep_frame(sweep, scenarios)
    extra = [t for t in (_fit_table(sweep), _plan_table(sweep, scenarios)) if t is not None]
    planner = (
        " Dotted with crosses: the memory planner's blocks for that many sequences (an "
        "estimate, [plan])."
        if sweep.plan is not None
        else ""
    )
    return [
        Table(sweep_table_frame(sweep, frame), caption),
        *extra,
        Chart(
            sweep_chart(frame, sweep.not_available(), plan=sweep.plan),
            "x: prompt tokens (log scale); one colour per load level; hollow markers: the "
            "level failed or is invalid; grey dotted lines: lengths not available from this "
            "target (hover the label for why)." + planner,
            drawn_by=("sweep",),
        ),
    ]


def _plan_table(sweep: SweepSummary, scenarios: Mapping[str, ScenarioSummary]) -> Table | None:
    """[plan]: the memory planner's prediction per length beside what was measured."""
    plan = sweep.plan
    rows = plan_comparison(sweep, scenarios)
    if plan is None or not rows:
        return None
    frame = pd.DataFrame(
        {
            "prompt tokens": r.input_tokens,
            "tokens per sequence (prompt + output)": r.tokens_per_sequence,
            "KV bytes per sequence (planned)": r.kv_bytes_per_sequence,
            "state bytes per sequence (planned)": r.state_bytes_per_sequence,
            "blocks per sequence (planned)": r.predicted_blocks,
            "blocks in use at 1 stream (measured)": r.measured_blocks,
            "KV bytes in use at 1 stream (measured)": r.measured_kv_bytes,
            "state bytes in use at 1 stream (measured)": r.measured_state_bytes,
            "sequences that fit (planned)": r.predicted_fit,
            "streams that fit (measured)": r.measured_fit,
        }
        for r in rows
    )
    return Table(
        frame,
        f'The memory planner (suites/plan, README "Memory planning"; an estimate from '
        f"{plan.model}) beside the sweep's measurements. {plan.deployment}. KV bytes per "
        f"token {plan.kv_bytes_per_token:,}, linear-attention state per sequence "
        f"{plan.state_bytes_per_sequence:,} bytes (flat in the context). A sequence holds "
        "prompt + output tokens at its last token; planned blocks are those tokens over "
        f"the block size ({plan.block_tokens or 'not known'}), rounded up; sequences that "
        f"fit: the cache's blocks over that (cache: {plan.cache_source}). Measured: the "
        "blocks in use at the highest scrape of the one-stream level, and the fit search's "
        "answer (all c running at once, none preempted: at least the planned count, since "
        "preemption waits until the cache is full).",
    )


def _interference_blocks(
    summary: InterferenceSummary, scenarios: Mapping[str, ScenarioSummary]
) -> list[Chart | Table]:
    """The interference run: a row per arm, and the chart of both sides of the trade."""
    rows = interference_rows(summary, scenarios)

    def ms(estimate: QuantileEstimate | None) -> float | None:
        return None if estimate is None else estimate.value * 1e3

    frame = pd.DataFrame(
        [
            {
                "chunked prefill": chunk_label(r.chunked_prefill_size),
                "decode ITL p50 quiet ms": ms(r.quiet_itl_p50_s),
                "decode ITL p50 mixed ms": ms(r.mixed_itl_p50_s),
                "decode ITL p99 quiet ms": ms(r.quiet_itl_p99_s),
                "decode ITL p99 mixed ms": ms(r.mixed_itl_p99_s),
                "long-prompt TTFT p50 ms": ms(r.prefill_ttft_p50_s),
                "long-prompt TTFT p99 ms": ms(r.prefill_ttft_p99_s),
            }
            for r in rows
        ]
    )
    caption = (
        f"Prefill interference: per arm (the reference target restarted with that "
        f"chunked-prefill size; whole = 0, every arm with a step budget of "
        f"{summary.max_num_batched_tokens} tokens) {summary.decode_streams} streams decode "
        f"{summary.decode_input_tokens}-token prompts into {summary.decode_output_tokens} "
        f"tokens alone (quiet) for {summary.duration_s:g} s, then for {summary.duration_s:g} s "
        f"while {summary.prefill_input_tokens}-token prompts arrive at "
        f"{summary.prefill_rate:g}/s (mixed). Every request measured; percentiles of the "
        "ok requests (ITL: every token gap)."
    )
    return [
        Table(frame, caption),
        Chart(
            interference_chart(rows),
            "Mixed (solid) against quiet (dashed): the decoders' ITL with and without long "
            "prompts arriving; right, those prompts' TTFT. Error bars: 95% intervals.",
            drawn_by=("interference",),
        ),
    ]


def _fit_table(sweep: SweepSummary) -> Table | None:
    """How many concurrent requests of each length fit ([sweep.fit]), probe by probe."""
    verdicts = {True: "fit", False: "did not", None: "not judged"}
    rows = [
        {
            "prompt tokens": point.input_tokens,
            "fit": fit_answer(point.fit),
            "probe": number,
            "streams": probe.level,
            "verdict": verdicts[probe.passed],
            "why": probe.reason,
        }
        for point in sweep.points
        if point.fit is not None
        for number, probe in enumerate(point.fit.probes, start=1)
    ]
    if not rows:
        return None
    return Table(
        pd.DataFrame(rows),
        "Concurrent requests that fit at each prompt length: c streams fit when the "
        "target's running-requests gauge showed all c running at once at some scrape of "
        "the probe and its preemptions counter did not rise; bracketing, then bisection "
        "to one stream (suites/serving/sweep_fit.py).",
    )


def _serving_blocks(run: RunData) -> list[Chart | Table]:
    requests = run.requests
    if requests.empty:
        return [Table(pd.DataFrame({"requests": [0]}), "The run has no request records.")]
    metrics = _per_request(requests)
    scenarios = _scenarios(run)
    blocks: list[Chart | Table] = [_levels_table(scenarios)]
    blocks.append(
        Chart(
            concurrency_curve(levels_frame(scenarios)),
            "One point per load level; ringed points are on the Pareto front (higher "
            "throughput, lower latency).",
            drawn_by=("concurrency",),
        )
    )
    # One level is a point, not a trade-off; a capacity run's probes are its levels.
    interactivity = interactivity_frame(scenarios)
    if has_numbers(interactivity).sum() >= 2:
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
    if isinstance(run.summary, ServingSummary) and run.summary.capacity is not None:
        blocks += _capacity_blocks(run.summary.capacity, scenarios)
    if isinstance(run.summary, ServingSummary) and run.summary.sweep is not None:
        blocks += _sweep_blocks(run.summary.sweep, scenarios)
    if isinstance(run.summary, ServingSummary) and run.summary.interference is not None:
        blocks += _interference_blocks(run.summary.interference, scenarios)
    if isinstance(run.summary, ServingSummary) and run.summary.mtp_ab is not None:
        blocks += mtp_ab_blocks(run.summary.mtp_ab)
    if isinstance(run.summary, ServingSummary) and run.summary.drill is not None:
        blocks += drill_blocks(run.summary.drill, requests)
    if isinstance(run.summary, ServingSummary) and run.summary.soak is not None:
        blocks += soak_blocks(run.summary.soak)
    if isinstance(run.summary, ServingSummary) and run.summary.telemetry is not None:
        figures = run.summary.accelerator_levels()
        blocks += accelerator_blocks(run.summary.telemetry, figures, run.accelerator)
    repeats = run.summary.repeats if isinstance(run.summary, ServingSummary) else ()
    blocks += workload_blocks(ServingSummary(scenarios=scenarios, repeats=repeats), requests)
    counters = target_counters_table(scenarios, metrics_unavailable(run.server_metrics))
    if counters is not None:
        blocks.append(counters)
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


# --- training --------------------------------------------------------------------------


_POLICY_COLUMNS = {
    "step_time_s": "step time s",
    "lost_s": "lost to restarts s",
    "tokens_per_s": "tokens/s",
    "effective_tokens_per_s": "effective tokens/s",
    "mfu_mean": "MFU mean",
    "ooms": "OOMs",
}


def _training_blocks(run: RunData) -> list[Chart | Table]:
    steps = run.steps
    if steps.empty:
        return [Table(pd.DataFrame({"steps": [0]}), "The run has no step records.")]
    table = step_table(steps)
    per_policy = policy_throughput_frame(table)
    shown = per_policy.rename(columns=_POLICY_COLUMNS)
    blocks: list[Chart | Table] = [
        Table(shown, "Per policy: effective tokens/s counts the time lost to restarts."),
        Chart(policy_throughput(per_policy, table), drawn_by=("steps", "training_throughput")),
        Chart(training_timeline(table, event_table(steps)), drawn_by=("steps", "training_events")),
        Chart(peak_memory(steps), drawn_by=("memory",)),
    ]
    for policy, matrix in policy_matrices(steps, policies(steps)).items():
        if matrix.size:
            heatmap = expert_load_heatmap(matrix, f"Expert load, {policy}")
            blocks.append(Chart(heatmap, drawn_by=("expert_load",)))
    summary = run.summary if isinstance(run.summary, TrainingSummary) else None
    if summary is not None and summary.simulator is not None:
        blocks += _simulator_blocks(summary.simulator)
    if summary is not None and summary.telemetry is not None:
        figures = {name: entry.accelerator for name, entry in summary.scenarios.items()}
        blocks += accelerator_blocks(summary.telemetry, figures, run.accelerator, training=True)
    return blocks


def _simulator_blocks(check: SimulatorCheck) -> list[Chart | Table]:
    efficiency = "; ".join(
        f"{size or 'model'}: {e:.1%} of peak, fitted on {check.fitted_on[size]}"
        for size, e in check.efficiency.items()
    )
    caption = (
        "The cluster simulator configured as this trainer (targets/cluster_sim/reference.py): "
        "predicted figures are simulated, before the measured ones are read. Error = "
        f"predicted / measured - 1; held to step time within {check.step_tolerance:.0%} and "
        f"peak memory within {check.peak_tolerance:.0%}. Its one fitted factor, compute "
        f"efficiency: {efficiency}; 'fitted' marks a scenario whose own steps set it."
    )
    if any(p.measured_step_s_paired is not None for p in check.scenarios.values()):
        caption += (
            " The scenarios ran interleaved (one step each in turn): 'step s measured' is "
            "a scenario's step at the fitted scenario's pace, its median x the median ratio "
            "of the two scenarios' steps in the same rounds, so the host's drift cancels."
        )
    if check.not_predicted:
        caption += " Not predicted: " + "; ".join(
            f"{name} ({why})" for name, why in check.not_predicted.items()
        )
    return [
        Table(simulator_frame(check), caption),
        Chart(simulator_chart(check), drawn_by=("simulator_check",)),
    ]


# --- distributed training --------------------------------------------------------------

DIST_MEASURED = (
    "Every figure is measured on this host, none simulated: each rank is a process on it, "
    "the ranks talk over gloo on loopback. "
)


# The names the tables give the summary's definitions (DistTrainingSummary.definitions).
_DIST_TERMS = {
    "job_step_s": "job step s",
    "tokens_per_s": "tokens/s",
    "effective_tokens_per_s": "effective tokens/s",
    "mfu": "MFU",
    "shares": "time shares",
    "bubble": "bubble",
    "straggler_spread": "straggler spread",
    "oom_rate": "OOM rate",
    "detect_s": "detect",
    "resume_s": "resume",
}


def _dist_defined(summary: DistTrainingSummary, *keys: str) -> str:
    """The summary's own definitions of ``keys`` (the code's, for an older summary)."""
    own = summary.definitions or {}
    return " ".join(f"{_DIST_TERMS[key]}: {own.get(key) or DIST_DEFINITIONS[key]}." for key in keys)


def _dist_training_blocks(run: RunData) -> list[Chart | Table]:
    summary = run.summary if isinstance(run.summary, DistTrainingSummary) else None
    blocks: list[Chart | Table] = []
    if summary is None or not summary.scenarios:
        blocks.append(
            Table(
                pd.DataFrame({"scenarios": [0]}),
                "The run has no summary of its scenarios (it ended before writing one).",
            )
        )
    else:
        peak = summary.peak_flops
        blocks += [
            Table(
                layout_frame(summary),
                DIST_MEASURED + "Per layout, policy and skew; shares, bubble and OOM rate in "
                "%, comm = all-to-all + send/recv + all-reduce + wait; peak memory per rank "
                "in MiB, rank order; p stages, m micro-batches per pipeline; peak FLOP/s per "
                f"rank {peak.flops_per_s / 1e9:,.1f} G ({peak.source}). "
                + _dist_defined(
                    summary,
                    "tokens_per_s",
                    "effective_tokens_per_s",
                    "mfu",
                    "shares",
                    "bubble",
                    "oom_rate",
                ),
            ),
            Table(
                rank_frame(summary),
                DIST_MEASURED + "Per scenario, its ranks: median compute seconds per step "
                "of each rank (rank order), the slowest (the others wait for it), the loss "
                "of the first and last completed step. "
                + _dist_defined(summary, "job_step_s", "straggler_spread"),
            ),
        ]
    if not run.steps.empty:
        blocks.append(
            Chart(
                time_split_chart(run.steps),
                DIST_MEASURED + "Each bar: one rank of one scenario, the mean over its step "
                "records (replays included) of each kind's seconds; compute is the step less "
                "the rest, so the bar's height is the rank's mean step time.",
                drawn_by=("dist_training",),
            )
        )
    if summary is None:
        return blocks
    blocks.append(
        Table(
            link_frame(summary),
            DIST_MEASURED + "This host's links, as the run measured them, not a cluster's: a "
            "simulation job's links_from = this run's directory gives them to the cluster "
            "simulator's communication model (targets/cluster_sim).",
        )
    )
    recoveries = recovery_frame(summary)
    if recoveries is not None:
        blocks.append(
            Table(
                recoveries,
                DIST_MEASURED + "Each failure (a killed rank, the fault drill, or an OOM) and "
                "the job's recovery from its newest checkpoint. "
                + _dist_defined(summary, "detect_s", "resume_s")
                + " Replayed losses bit-equal: k of the n rank-step records run again "
                "after the failure whose loss equals the first run's bit for bit.",
            )
        )
    if summary.telemetry is not None:
        # A job step is every rank's last execution of it (collectors.dist_training_summary).
        figures = {name: entry.accelerator for name, entry in summary.scenarios.items()}
        blocks += accelerator_blocks(summary.telemetry, figures, run.accelerator, training=True)
    return blocks


# --- micro -----------------------------------------------------------------------------


def _micro_blocks(run: RunData) -> list[Chart | Table]:
    samples = run.samples
    if samples is None or samples.empty:
        return [Table(pd.DataFrame({"samples": [0]}), "The run has no samples.")]
    return [
        Table(micro_summary(samples), "Per metric: samples, mean, median with its 95% CI."),
        Chart(micro_distributions(samples), drawn_by=("micro",)),
    ]


def _simulation_blocks(run: RunData) -> list[Chart | Table]:
    summary = run.summary if isinstance(run.summary, SimulationSummary) else None
    if summary is None or (not summary.scenarios and not summary.reproductions):
        return [Table(pd.DataFrame({"scenarios": [0]}), "The run has no simulated scenarios.")]
    simulated = "Every figure is simulated by targets/cluster_sim, none measured. "
    blocks: list[Chart | Table] = []
    if summary.scenarios:
        blocks += [
            Table(scenario_frame(summary), simulated + "Per job, policy and skew; "
                  + " ".join(summary.assumptions)),
            Chart(oom_rate_chart(summary), drawn_by=("cluster_sim",)),
            Chart(policy_chart(summary), drawn_by=("cluster_sim",)),
            Chart(memory_chart(summary), drawn_by=("cluster_sim",)),
        ]  # fmt: skip
    if summary.ablation:
        caption = (
            simulated + "Seed 000's ablation: each step's effective throughput over the "
            "baseline, same job and skew; the last column is the paper's figure, not ours."
        )
        blocks.append(Table(ablation_frame(summary), caption))
    if summary.reproductions:
        caption = simulated + "Published MoE training runs: their figure beside ours (error = "
        blocks.append(Table(reproduction_frame(summary), caption + "simulated / published - 1)."))
    return blocks


def _accuracy_blocks(run: RunData) -> list[Chart | Table]:
    summary = run.summary if isinstance(run.summary, AccuracySummary) else None
    return list(accuracy_blocks(summary))


_BLOCKS: dict[str, Callable[[RunData], list[Chart | Table]]] = {
    "serving": _serving_blocks,
    "training": _training_blocks,
    "training-dist": _dist_training_blocks,
    "micro": _micro_blocks,
    "accuracy": _accuracy_blocks,
    "simulation": _simulation_blocks,
}


def run_section(run: RunData) -> Section:
    """The section of one run: its conditions, then the figures of its kind."""
    make = _BLOCKS.get(run.kind)
    blocks = make(run) if make else []
    notes = list(run.manifest.notes)
    if make is None:
        notes.append(f"No figures for runs of suite {run.kind!r}; its conditions only.")
    return Section(
        title=f"{run.kind} run {run.run_id}",
        anchor=f"run-{run.run_id}",
        facts=_facts(run),
        status=run.manifest.status,
        status_reason=run.manifest.status_reason,
        notes=notes,
        details=_details(run),
        condition_line=_condition_line(run),
        blocks=blocks,
    )


def build_report(runs: list[RunData], title: str) -> str:
    """The self-contained HTML page of ``runs`` (one section each, in the order given)."""
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    sections = [run_section(run) for run in runs]
    return render_page(
        title,
        sections,
        appendix_html(sections),
        generated=f"Generated by moeperf at {stamp} from {len(runs)} run(s); works offline.",
    )


def report_command(
    run_refs: list[str],
    runs_dir: str,
    out: str | None = None,
    print_fn: Callable[[str], None] = print,
    *,
    force: bool = False,
) -> int:
    """Write the report of ``run_refs`` (ids, prefixes, directories or "latest") and print
    its path: ``out`` when given, else ``report.html`` in the run's directory (one run) or
    ``report-A-vs-B.html`` in ``runs_dir`` (several). An existing file at the default path
    is refused (exit 2) unless ``force`` (``reports.page_path``)."""
    if not run_refs:
        raise ReportUsageError(
            "name at least one run: an id, a unique prefix, a directory or latest"
        )
    store = RunStore(runs_dir)
    runs = [load_run(store, ref) for ref in run_refs]
    if len(runs) == 1:
        try:
            default = store.open(run_refs[0]).directory / "report.html"
        except CollectorError as exc:
            raise ReportUsageError(str(exc)) from None
    else:
        default = store.root / several_runs_name([run.run_id for run in runs])
    # Checked before the page is built (seconds for a large run), and again by the write.
    target = choose_page_path(default, out, force)
    title = "moeperf report: " + ", ".join(run.run_id for run in runs)
    page = build_report(runs, title)
    write_page(target.path, page, replace=target.replace)
    print_fn(str(target.path))
    return 0
