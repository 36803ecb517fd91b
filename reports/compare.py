"""Side-by-side comparison of two runs: the gate's statistics, without a verdict.

Per metric (the gate's metrics, ``reports.samples``): run A's and run B's value of the
statistic, B - A, B / A with its bootstrap interval, and a two-sided p-value from the
gate's test for that statistic (``reports.stats.rank_test``), unadjusted. Values are the
gate's: the headline output tokens/s ("output_tok_s tokens/window": output tokens of the
ok requests / the measured window, the run summary's number) gets values and a ratio but,
as in the gate, no interval or test. Metrics with fewer samples than the gate needs get
values but no interval or p-value.

Runs whose requests asked different things of the target (sampling, usage options, ...:
``reports.comparability.check_requests``) are refused unless forced; other differences of
host, kind or spec are only noted.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from moeperf.collectors.serving_records import ServingSummary
from moeperf.collectors.sources.fingerprint import fingerprint_key
from moeperf.collectors.store import RunStore
from moeperf.reports.comparability import check_requests, check_specs
from moeperf.reports.gate_output import format_value, text_table
from moeperf.reports.runs import RunData, load_run
from moeperf.reports.samples import run_samples
from moeperf.reports.stats import bootstrap_ratio_ci, min_samples, rank_test

COLUMNS = (
    "metric",
    "level",
    "statistic",
    "direction",
    "unit",
    "n_a",
    "n_b",
    "a",
    "b",
    "difference",
    "ratio",
    "ci_low",
    "ci_high",
    "p_value",
)


def compare_runs(
    a: RunData,
    b: RunData,
    *,
    ci_level: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
) -> pd.DataFrame:
    """One row per metric of either run (NaN where a side lacks it); ratios are B / A."""
    left = {m.key: m for m in run_samples(a)}
    right = {m.key: m for m in run_samples(b)}
    rng = np.random.default_rng(seed)
    rows = []
    for key in [*left, *(k for k in right if k not in left)]:
        ma, mb = left.get(key), right.get(key)
        meta = ma or right[key]  # the key came from one side or the other
        row: dict[str, Any] = dict(
            metric=meta.name,
            level=meta.level,
            statistic=meta.statistic,
            direction=meta.direction,
            unit=meta.unit,
            n_a=ma.n if ma else 0,
            n_b=mb.n if mb else 0,
            a=ma.point if ma else np.nan,
            b=mb.point if mb else np.nan,
        )
        row["difference"] = row["b"] - row["a"]
        row["ratio"] = row["b"] / row["a"] if row["a"] and row["a"] > 0 else np.nan
        row["ci_low"] = row["ci_high"] = row["p_value"] = np.nan
        tested = meta.kind != "reported"
        if tested and ma and mb and min(ma.n, mb.n) >= min_samples(meta.statistic):
            ci = bootstrap_ratio_ci(ma.values, mb.values, meta.statistic, n_boot, ci_level, rng)
            if ci is not None:
                row["ci_low"], row["ci_high"] = ci
            row["p_value"] = rank_test(ma.values, mb.values, meta.statistic, None)[0]
        rows.append(row)
    return pd.DataFrame(rows, columns=list(COLUMNS))


def run_line(label: str, run: RunData) -> str:
    """``A: <run id>  status=<status> (<reason>)``: what a reader must know before a row."""
    m = run.manifest
    reason = f" ({m.status_reason})" if m.status_reason else ""
    return f"{label}: {run.run_id}  status={m.status}{reason}"


def level_marks(run: RunData) -> dict[str, str]:
    """The levels of ``run`` whose numbers do not stand, with their status ("" for the
    whole run: it did not end complete)."""
    marks: dict[str, str] = {}
    if run.manifest.status != "complete":
        marks[""] = run.manifest.status
    summary = run.summary
    if isinstance(summary, ServingSummary):
        marks.update({name: e.status for name, e in summary.scenarios.items() if e.status != "ok"})
    return marks


def format_comparison(
    frame: pd.DataFrame,
    a_label: str,
    b_label: str,
    marks: tuple[dict[str, str], dict[str, str]] = ({}, {}),
) -> str:
    """The table; ``marks`` (``level_marks`` of A and B) flag each row that a run which did
    not end complete, or a level that is not ok, contributes to."""

    def num(x: float, fmt: str) -> str:
        return "-" if pd.isna(x) else format(x, fmt)

    def flag(side: str, level: str, mark: dict[str, str]) -> str:
        status = mark.get(level) or mark.get("")
        return f"{side} {status}" if status else ""

    rows: list[tuple[str, ...]] = []
    # Records, not itertuples: a row's fields are then plain Python values (the COLUMNS of
    # compare_runs), where itertuples would type each as any pandas scalar.
    for r in frame.to_dict("records"):
        ratio = num(r["ratio"], ".3f")
        if not pd.isna(r["ci_low"]):
            ratio += f" [{r['ci_low']:.3f}, {r['ci_high']:.3f}]"
        rows.append(
            (
                f"{r['metric']} {r['statistic']}",
                r["direction"],
                f"{r['n_a']}/{r['n_b']}",
                format_value(None if pd.isna(r["a"]) else r["a"], r["unit"]),
                format_value(None if pd.isna(r["b"]) else r["b"], r["unit"]),
                ratio,
                num(r["p_value"], ".2g"),
                ", ".join(f for f in (flag("A", r["level"], marks[0]) if r["n_a"] else "",
                                      flag("B", r["level"], marks[1]) if r["n_b"] else "")
                          if f),
            )
        )  # fmt: skip
    headers: tuple[str, ...] = (
        "metric", "better", "n A/B", "A", "B", "B/A [95% CI]", "p (two-sided)", "not ok"
    )  # fmt: skip
    if not any(marks):  # both complete, every level ok: no column to read
        rows = [row[:-1] for row in rows]
        headers = headers[:-1]
    return "\n".join([a_label, b_label, text_table(headers, rows)])


def compare_command(
    a_ref: str,
    b_ref: str,
    runs_dir: str | Path = "runs",
    out: Callable[[str], Any] = print,
    force: bool = False,
) -> int:
    """Print runs A and B side by side. Always 0 (a comparison has no verdict); an
    unknown run, or runs whose request settings differ without ``force``, raise
    ReportUsageError (exit 2)."""
    store = RunStore(runs_dir)
    a, b = load_run(store, a_ref), load_run(store, b_ref)
    forced = check_requests(a.manifest, b.manifest, force)
    frame = compare_runs(a, b)
    both = int(((frame["n_a"] > 0) & (frame["n_b"] > 0)).sum()) if len(frame) else 0
    if both == 0:
        out(run_line("A", a))
        out(run_line("B", b))
        out(
            f"nothing in common: no metric is in both runs (A has "
            f"{int((frame['n_a'] > 0).sum()) if len(frame) else 0}, B has "
            f"{int((frame['n_b'] > 0).sum()) if len(frame) else 0}); compare runs of one "
            "spec, or read each with moeperf runs show"
        )
    else:
        marks = (level_marks(a), level_marks(b))
        out(format_comparison(frame, run_line("A", a), run_line("B", b), marks))
    if fingerprint_key(a.manifest.host) != fingerprint_key(b.manifest.host):
        out("note: the runs were measured on different hosts (fingerprints differ)")
    if a.kind != b.kind:
        out(f"note: the runs are of different kinds ({a.kind}, {b.kind})")
    for difference in check_specs(a.manifest, b.manifest, force=True).differences:
        if not difference.request:
            out(f"note: the specs differ: {difference.describe()} (baseline = A, candidate = B)")
    for difference in forced:
        out(f"forced: the requests differ: {difference.describe()} (baseline = A, candidate = B)")
    return 0
