"""The gate's output: the verdict table as text (terminal and gate.txt), gate.json, and
``moeperf gate RUN --baseline NAME`` itself (gate, print, write)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from moeperf.collectors.capacity_records import CapacitySummary
from moeperf.collectors.deploy_sweep_summary import arm_capacity
from moeperf.collectors.serving_records import ServingSummary
from moeperf.collectors.soak_records import SoakSummary
from moeperf.collectors.store import RunStore
from moeperf.reports.comparability import check_fingerprints, check_specs
from moeperf.reports.errors import ReportUsageError
from moeperf.reports.gate import CAPACITY, gate
from moeperf.reports.runs import RunData, load_run
from moeperf.reports.samples import MetricSamples, run_samples
from moeperf.reports.soak_gate import SOAK, soak_verdicts
from moeperf.reports.stats import MIN_EFFECT_KEYS
from moeperf.reports.verdicts import (
    COVERAGE_RULE,
    FAILING,
    OUTCOMES,
    RULE,
    GateResult,
    Verdict,
    jsonable,
)


def text_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain fixed-width table (the same text on the terminal and in gate.txt)."""
    widths = [max(len(str(c)) for c in column) for column in zip(headers, *rows, strict=True)]

    def line(cells: Iterable[object]) -> str:
        return "  ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    return "\n".join([line(headers), line("-" * w for w in widths), *map(line, rows)])


def format_value(value: float | None, unit: str) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    if unit == "s":
        return f"{value * 1e3:.4g} ms"
    return f"{value:.4g} {unit}".rstrip()


def format_ratio(v: Verdict) -> str:
    if v.ratio is None:
        return "-"
    ci = f" [{v.ci_low:.3f}, {v.ci_high:.3f}]" if v.ci_low is not None else ""
    return f"{v.ratio:.3f}{ci}"


def _p(value: float | None) -> str:
    return "-" if value is None else f"{value:.2g}"


def _capacity_cell(held: float | None, failed: float | None) -> str:
    """A capacity search's levels in a table cell: "32 held, 33 failed"."""
    parts = [f"{held:g} held"] if held is not None else []
    parts += [f"{failed:g} failed"] if failed is not None else []
    return ", ".join(parts) or "-"


def _value_cells(v: Verdict) -> tuple[str, str]:
    if v.metric_class == CAPACITY:
        return (
            _capacity_cell(v.baseline, v.baseline_failed),
            _capacity_cell(v.candidate, v.candidate_failed),
        )
    return format_value(v.baseline, v.unit), format_value(v.candidate, v.unit)


def _outcome_cell(v: Verdict) -> str:
    return v.outcome.upper() if v.outcome in FAILING else v.outcome


def format_gate(result: GateResult) -> str:
    rows = [
        (
            v.key,
            v.direction,
            *_value_cells(v),
            format_ratio(v),
            _p(v.p_value),
            _p(v.q_value),
            _outcome_cell(v),
        )
        for v in result.verdicts
    ]
    headers = ("metric", "better", "baseline", "candidate", "ratio [CI]", "p", "q", "outcome")
    # ";" between counts: an outcome's name may hold a comma.
    counts = "; ".join(f"{len(result.by_outcome(o))} {o}" for o in OUTCOMES if result.by_outcome(o))
    judged, required = len(result.judged), len(result.required)
    lines = [
        f"gate: {result.candidate_label} (candidate) vs {result.baseline_label} (baseline)",
        *(f"note: {n}" for n in result.notes),
        *(f"forced: {f}" for f in result.forced),
        text_table(headers, rows),
        f"judged {judged} of {required} required metrics ({counts or 'no metrics'}); "
        f"alpha={result.alpha:g} (Benjamini-Hochberg), {result.ci_level:.0%} bootstrap CI "
        f"({result.n_boot} resamples)",
        f"rule: {RULE}",
        f"coverage: {COVERAGE_RULE}",
    ]
    if result.min_effects:
        set_here = ", ".join(f"{k}={v:g}" for k, v in result.min_effects.items())
        lines.append(f"minimum effects set for this gate: {set_here}")
    for v in result.verdicts:
        # Both searches' intervals are in the reason; a missing one has its line below.
        # A soak's trend is judged by its own interval: the reason says which.
        if v.metric_class in (CAPACITY, SOAK) and v.outcome == "regression":
            lines.append(f"REGRESSION {v.key}: {v.reason}")
        elif v.metric_class in (CAPACITY, SOAK) and v.outcome != "missing from candidate":
            lines.append(f"{v.key} ({v.outcome}): {v.reason}")
    for v in result.regressions:
        if v.metric_class in (CAPACITY, SOAK):
            continue  # on its line above: levels or a slope, no ratio
        # A regression was tested: its ratio and interval are there.
        assert v.ratio is not None and v.ci_low is not None and v.ci_high is not None
        lines.append(
            f"REGRESSION {v.key}: {format_value(v.baseline, v.unit)} -> "
            f"{format_value(v.candidate, v.unit)} ({v.ratio - 1:+.1%}, {result.ci_level:.0%} "
            f"CI {v.ci_low - 1:+.1%} to {v.ci_high - 1:+.1%}, q={v.q_value:.2g})"
        )
    for v in result.by_outcome("missing from candidate"):
        lines.append(f"MISSING FROM CANDIDATE {v.key}: {v.reason}")
    lines.append(verdict_line(result))
    return "\n".join(lines)


def verdict_line(result: GateResult) -> str:
    """The last line: FAIL, INCONCLUSIVE or PASS, why, and the exit code."""
    judged = f"{len(result.judged)} of {len(result.required)} metrics judged"
    forced = " (FORCED: see 'forced' above)" if result.forced else ""
    if result.status == "fail":
        parts = []
        if regressions := len(result.regressions):
            parts.append(f"{regressions} regression(s)")
        if missing := len(result.by_outcome("missing from candidate")):
            parts.append(f"{missing} metric(s) missing from candidate")
        head = f"FAIL: {', '.join(parts)}; {judged}"
    elif result.status == "inconclusive":
        head = f"INCONCLUSIVE: {result.coverage_problem}; the gate cannot vouch for this run"
    else:
        head = f"PASS: no regression; {judged}"
    return f"{head}{forced} (exit {result.exit_code})"


def write_gate(result: GateResult, directory: Path, extra: Mapping[str, Any] | None = None) -> Path:
    """Write gate.json and gate.txt into ``directory``; return the gate.json path."""
    directory.mkdir(parents=True, exist_ok=True)
    body = {
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        **result.to_dict(),
        **jsonable(dict(extra or {})),
    }
    path = directory / "gate.json"
    path.write_text(json.dumps(body, indent=2), encoding="utf-8")
    (directory / "gate.txt").write_text(format_gate(result) + "\n", encoding="utf-8")
    return path


def gate_command(
    run_ref: str,
    baseline_data: RunData,
    runs_dir: str | Path = "runs",
    out_dir: str | Path | None = None,
    force: bool = False,
    out: Callable[[str], Any] = print,
    *,
    baseline_label: str | None = None,
    alpha: float = 0.05,
    min_effects: Mapping[str, float] | None = None,
) -> int:
    """Gate a run against a baseline: print the table, write gate.json and gate.txt into
    ``out_dir`` (default: the run's directory). Returns the exit code (0 pass, 1 fail or
    inconclusive); a usage problem (unknown run, another host or spec without ``force``)
    raises ReportUsageError (exit 2).

    Minimum effects: the candidate's spec ``[gate] min_effects``, then ``min_effects``
    (the command line's), which win key by key."""
    store = RunStore(runs_dir)
    candidate = load_run(store, run_ref)
    directory = Path(out_dir) if out_dir else store.open(candidate.run_id).directory
    label = baseline_label or baseline_data.run_id
    result = judge_runs(
        candidate,
        baseline_data,
        force,
        baseline_label=label,
        alpha=alpha,
        min_effects=min_effects,
        promote_hint=promote_hint(candidate.run_id, label, runs_dir),
        new_baseline_hint=new_baseline_hint(candidate, runs_dir),
    )
    out(format_gate(result))
    path = write_gate(result, directory)
    out(f"written: {path} and gate.txt")
    return result.exit_code


def judge_runs(
    candidate: RunData,
    baseline_data: RunData,
    force: bool = False,
    *,
    baseline_label: str,
    alpha: float = 0.05,
    min_effects: Mapping[str, float] | None = None,
    promote_hint: str = "",
    new_baseline_hint: str = "",
    baseline_samples: Sequence[MetricSamples] | None = None,
) -> GateResult:
    """The gate's verdict on ``candidate`` against ``baseline_data``, exactly as
    ``moeperf gate RUN --baseline`` reaches it: the host and spec checks (a mismatch raises
    ReportUsageError unless ``force``), the candidate spec's minimum effects under
    ``min_effects``, and a note for a run that did not end complete. ``baseline_samples``
    replace the baseline run's own (e.g. several runs pooled, ``pool_samples``).
    ``promote_hint`` (another host) and ``new_baseline_hint`` (another spec) are the
    commands a refusal suggests."""
    fingerprint = check_fingerprints(
        baseline_data.manifest.host, candidate.manifest.host, force, promote_hint=promote_hint
    )
    spec = check_specs(
        baseline_data.manifest, candidate.manifest, force, promote_hint=new_baseline_hint
    )
    candidate_samples = run_samples(candidate)
    base = run_samples(baseline_data) if baseline_samples is None else baseline_samples
    if searched(baseline_data):
        base = unprobed_optional(base, candidate_samples)
    result = gate(
        candidate_samples,
        base,
        alpha=alpha,
        min_effects={**spec_min_effects(candidate.manifest.spec_resolved), **(min_effects or {})},
        fingerprint=fingerprint,
        spec=spec,
        baseline_label=baseline_label,
        candidate_label=candidate.run_id,
        baseline_capacity=run_capacity(baseline_data),
        candidate_capacity=run_capacity(candidate),
        fits=run_fits(baseline_data, candidate),
        arms=run_arms(baseline_data, candidate),
        unjudged_levels=unsound_levels(baseline_data, candidate),
    )
    result.verdicts.extend(soak_verdicts(run_soak(candidate), run_soak(baseline_data)))
    for run, side in ((candidate, "candidate"), (baseline_data, "baseline")):
        if run.manifest.status != "complete":
            reason = f" ({run.manifest.status_reason})" if run.manifest.status_reason else ""
            result.notes.append(f"the {side} run is {run.manifest.status}{reason}")
    return result


def unsound_levels(baseline: RunData, candidate: RunData) -> dict[str, str]:
    """The levels whose numbers may be the client's in either run (a serving level marked
    invalid: the client was the bottleneck), and why. A failed level is still judged: its
    failures are the target's, and a level with no ok request is "missing"."""
    found: dict[str, str] = {}
    for run, side in ((candidate, "candidate"), (baseline, "baseline")):
        summary = run.summary
        if not isinstance(summary, ServingSummary):
            continue
        for name, entry in summary.scenarios.items():
            if entry.status == "invalid" and name not in found:
                found[name] = f"level {entry.status} in the {side} ({entry.status_reason})"
    return found


def unprobed_optional(
    baseline: Sequence[MetricSamples], candidate: Sequence[MetricSamples]
) -> list[MetricSamples]:
    """A search (capacity, or a sweep's fit) chooses its probe levels from what it
    measures, so two runs probe different levels: the baseline's metrics of a level the
    candidate never probed are optional (informational when missing); the capacity
    verdict judges a capacity search."""
    probed = {m.level for m in candidate}
    return [
        m if m.level in probed or m.kind != "required" else dataclasses.replace(m, kind="optional")
        for m in baseline
    ]


def searched(run: RunData) -> bool:
    """Whether some of the run's levels were chosen by a search from what it measured:
    a capacity search's probes, or a sweep's fit probes ([sweep.fit])."""
    summary = run.summary
    if not isinstance(summary, ServingSummary):
        return False
    fits = summary.sweep is not None and any(p.fit for p in summary.sweep.points)
    return summary.capacity is not None or fits


def _fits(run: RunData) -> dict[str, CapacitySummary]:
    summary = run.summary
    if not isinstance(summary, ServingSummary) or summary.sweep is None:
        return {}
    return {f"in={p.input_tokens} fit": p.fit for p in summary.sweep.points if p.fit is not None}


def run_fits(
    baseline: RunData, candidate: RunData
) -> dict[str, tuple[CapacitySummary | None, CapacitySummary | None]]:
    """Each prompt length's fit search ([sweep.fit]) of either run: (baseline's, candidate's)."""
    base, cand = _fits(baseline), _fits(candidate)
    return {name: (base.get(name), cand.get(name)) for name in {**base, **cand}}


def _arms(run: RunData) -> dict[str, CapacitySummary]:
    summary = run.summary
    if not isinstance(summary, ServingSummary) or summary.deploy_sweep is None:
        return {}
    sweep = summary.deploy_sweep
    found = {f"{arm.label} capacity": arm_capacity(arm, sweep.slo) for arm in sweep.arms}
    return {name: capacity for name, capacity in found.items() if capacity is not None}


def run_arms(
    baseline: RunData, candidate: RunData
) -> dict[str, tuple[CapacitySummary | None, CapacitySummary | None]]:
    """Each arm's capacity of a deployment sweep ([deploy_sweep]) in either run, by its
    label: (baseline's, candidate's). An arm that ran no level has none."""
    base, cand = _arms(baseline), _arms(candidate)
    return {name: (base.get(name), cand.get(name)) for name in {**base, **cand}}


def run_soak(run: RunData) -> SoakSummary | None:
    """A soak run's trends (its summary's ``soak``); None for any other."""
    summary = run.summary
    return summary.soak if isinstance(summary, ServingSummary) else None


def run_capacity(run: RunData) -> CapacitySummary | None:
    """A capacity run's search result (its summary's ``capacity``); None for any other."""
    summary = run.summary
    return summary.capacity if isinstance(summary, ServingSummary) else None


def promote_hint(run_id: str, baseline_label: str, runs_dir: str | Path = "runs") -> str:
    """The command that would make this run a new version of the baseline it is gated
    against (a run of the same spec on another host: ``baseline promote`` refuses a run
    whose spec differs from the baseline's last version)."""
    name = baseline_label.partition("@")[0]
    where = "" if Path(runs_dir) == Path("runs") else f"--runs-dir {runs_dir} "
    return f"moeperf {where}baseline promote {run_id} --name {name}"


def new_baseline_hint(run: RunData, runs_dir: str | Path = "runs") -> str:
    """The command that records a run of another spec as a baseline of its own, named
    after its spec: it cannot change the baseline it was gated against."""
    name = str(run.manifest.spec_resolved.get("name") or run.manifest.suite or "baseline")
    return promote_hint(run.run_id, name, runs_dir)


def spec_min_effects(spec_resolved: Mapping[str, Any]) -> dict[str, float]:
    """The ``[gate] min_effects`` of a resolved spec (validated by suites.spec), or none."""
    table = spec_resolved.get("gate")
    effects = table.get("min_effects") if isinstance(table, Mapping) else None
    if not isinstance(effects, Mapping):
        return {}
    return {str(k): float(v) for k, v in effects.items()}


def parse_min_effects(texts: Sequence[str]) -> dict[str, float]:
    """``--min-effect KEY=FRACTION`` flags (a class or a metric, ``MIN_EFFECT_KEYS``) as a
    table; ReportUsageError (exit 2) naming the valid keys for an unknown one, or a
    fraction outside [0, 1)."""
    effects: dict[str, float] = {}
    for text in texts:
        key, sep, raw = text.partition("=")
        key = key.strip()
        if not sep or key not in MIN_EFFECT_KEYS:
            raise ReportUsageError(
                f"--min-effect {text}: expected KEY=FRACTION with KEY one of "
                f"{', '.join(MIN_EFFECT_KEYS)}"
            )
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if not 0 <= value < 1:
            raise ReportUsageError(f"--min-effect {text}: FRACTION must be in [0, 1), e.g. 0.05")
        effects[key] = value
    return effects
