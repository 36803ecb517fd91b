"""The gate's output: the verdict table as text (terminal and gate.txt), gate.json, and
``moeperf gate RUN --baseline NAME`` itself (gate, print, write)."""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from collectors.store import RunStore
from reports.gate import OUTCOMES, RULE, GateResult, Verdict, check_fingerprints, gate, jsonable
from reports.runs import RunData, load_run
from reports.samples import run_samples


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


def format_gate(result: GateResult) -> str:
    rows = [
        (
            v.key,
            v.direction,
            format_value(v.baseline, v.unit),
            format_value(v.candidate, v.unit),
            format_ratio(v),
            _p(v.p_value),
            _p(v.q_value),
            v.outcome.upper() if v.outcome == "regression" else v.outcome,
        )
        for v in result.verdicts
    ]
    headers = ("metric", "better", "baseline", "candidate", "ratio [CI]", "p", "q", "outcome")
    counts = ", ".join(f"{len(result.by_outcome(o))} {o}" for o in OUTCOMES)
    lines = [
        f"gate: {result.candidate_label} (candidate) vs {result.baseline_label} (baseline)",
        *(f"note: {n}" for n in result.notes),
        text_table(headers, rows),
        f"{counts}; alpha={result.alpha:g} (Benjamini-Hochberg), "
        f"{result.ci_level:.0%} bootstrap CI ({result.n_boot} resamples)",
        f"rule: {RULE}",
    ]
    for v in result.regressions:
        # A regression was tested: its ratio and interval are there.
        assert v.ratio is not None and v.ci_low is not None and v.ci_high is not None
        lines.append(
            f"REGRESSION {v.key}: {format_value(v.baseline, v.unit)} -> "
            f"{format_value(v.candidate, v.unit)} ({v.ratio - 1:+.1%}, {result.ci_level:.0%} "
            f"CI {v.ci_low - 1:+.1%} to {v.ci_high - 1:+.1%}, q={v.q_value:.2g})"
        )
    verdict = "FAIL: regression" if result.exit_code else "PASS: no regression"
    lines.append(f"{verdict} (exit {result.exit_code})")
    return "\n".join(lines)


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
    ``out_dir`` (default: the run's directory). Returns the exit code (0 pass, 1 fail);
    a usage problem (unknown run, other host without ``force``) raises ReportUsageError."""
    store = RunStore(runs_dir)
    candidate = load_run(store, run_ref)
    directory = Path(out_dir) if out_dir else store.open(candidate.run_id).directory
    fingerprint = check_fingerprints(baseline_data.manifest.host, candidate.manifest.host, force)
    result = gate(
        run_samples(candidate),
        run_samples(baseline_data),
        alpha=alpha,
        min_effects=min_effects,
        fingerprint=fingerprint,
        baseline_label=baseline_label or baseline_data.run_id,
        candidate_label=candidate.run_id,
    )
    for run, side in ((candidate, "candidate"), (baseline_data, "baseline")):
        if run.manifest.status != "complete":
            reason = f" ({run.manifest.status_reason})" if run.manifest.status_reason else ""
            result.notes.append(f"the {side} run is {run.manifest.status}{reason}")
    out(format_gate(result))
    path = write_gate(result, directory)
    out(f"written: {path} and gate.txt")
    return result.exit_code
