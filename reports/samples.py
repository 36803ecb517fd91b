"""The raw samples the gate compares, per metric, derived from one run's records.

A ``MetricSamples`` is one metric of one run: the raw samples and the statistic the gate
compares (a percentile, the mean or the median of them), which way is better, and the
class that sets its minimum effect. What is derived, exactly:

Serving runs (only requests of the "measure" phase with status "ok"; latencies come from
``collectors.latency``, never redefined here), per scenario (load level):
- ``ttft_s`` p50 and p99, ``tpot_s`` p50 and p99, ``itl_s`` p50 and p99 (one sample per
  token), ``e2e_s`` p50: lower is better, class "latency".
- ``output_tok_s`` mean: generated tokens of the measured ok requests counted per second.
  Bins are 1 s wide, aligned on the first actual send of the measured requests and ending
  at the last one (after it the load tails off as streams stop); only whole bins count,
  and the first whole bin is dropped too (the ramp while the first requests wait for their
  first token). Each bin is one sample; higher is better, class "throughput".
  Error ratio is not a gate metric: failures are counts, not samples, and need a binomial
  comparison rather than these tests.

Micro runs (suite "micro"): the samples table, one sample per round, compared by their
median; direction and unit from the records; class "micro".

Training runs (the steps table): per scenario, whole-step records (micro-batch records are
used only when there are no whole-step ones), one sample per step: the step time (the
slowest rank, first start to last end) by median, lower is better; tokens per second (all
ranks' tokens / step time) by mean, higher is better; MFU (mean over ranks) by mean,
higher is better; class "training".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from collectors.latency import NS_PER_S, itl_samples_s, per_request
from collectors.tables import flatten_list_column
from reports.runs import RunData

THROUGHPUT_BIN_S = 1.0

_SERVING_LATENCIES = (
    ("ttft_s", ("p50", "p99")),
    ("tpot_s", ("p50", "p99")),
    ("itl_s", ("p50", "p99")),
    ("e2e_s", ("p50",)),
)


@dataclass(frozen=True, eq=False)
class MetricSamples:
    """One metric of one run: its raw samples and how the gate compares them."""

    name: str  # e.g. "c=16/ttft_s"
    statistic: str  # "p50", "p99", "mean" or "median"
    values: np.ndarray = field(repr=False)
    direction: str  # "lower" or "higher" is better
    metric_class: str  # "latency", "throughput", "micro" or "training"
    unit: str

    def __post_init__(self) -> None:
        values = np.asarray(self.values, dtype=float)
        object.__setattr__(self, "values", values[np.isfinite(values)])
        if self.direction not in ("lower", "higher"):
            raise ValueError(f"{self.name}: direction must be 'lower' or 'higher'")

    @property
    def key(self) -> str:
        """How the metric is named in tables and gate.json: "c=16/ttft_s p99"."""
        return f"{self.name} {self.statistic}"

    @property
    def n(self) -> int:
        return len(self.values)


def run_samples(run: RunData) -> list[MetricSamples]:
    """Every gate metric of a run (a ``reports.runs.RunData``)."""
    if run.kind == "micro":
        return micro_samples(run.samples)
    if run.kind == "training":
        return training_samples(run.steps)
    return serving_samples(run.requests)


def serving_samples(requests: pd.DataFrame) -> list[MetricSamples]:
    if not len(requests):
        return []
    measured = requests[(requests["phase"] == "measure") & (requests["status"] == "ok")]
    out: list[MetricSamples] = []
    for scenario in dict.fromkeys(requests["scenario"]):
        rows = measured[measured["scenario"] == scenario]
        metrics = per_request(rows)
        columns = {n: metrics[n].to_numpy(dtype=float) for n in ("ttft_s", "tpot_s", "e2e_s")}
        columns["itl_s"] = itl_samples_s(rows)["itl_s"].to_numpy(dtype=float)
        for name, statistics in _SERVING_LATENCIES:
            for statistic in statistics:
                out.append(
                    MetricSamples(
                        f"{scenario}/{name}", statistic, columns[name], "lower", "latency", "s"
                    )
                )
        out.append(
            MetricSamples(
                f"{scenario}/output_tok_s",
                "mean",
                throughput_bins(rows),
                "higher",
                "throughput",
                "tok/s",
            )
        )
    return out


def throughput_bins(requests: pd.DataFrame, bin_s: float = THROUGHPUT_BIN_S) -> np.ndarray:
    """Generated tokens per second in whole bins (see the module docstring)."""
    if not len(requests):
        return np.empty(0)
    start = int(requests["send_ns"].min())
    end = int(requests["send_ns"].max())
    bin_ns = int(bin_s * NS_PER_S)
    whole = (end - start) // bin_ns
    if whole < 2:
        return np.empty(0)
    times = flatten_list_column(requests["chunk_ns"])
    tokens = flatten_list_column(requests["chunk_tokens"])
    index = (times - start) // bin_ns
    keep = (index >= 0) & (index < whole)
    counts = np.bincount(index[keep], weights=tokens[keep], minlength=whole)
    return counts[1:] / bin_s


def micro_samples(samples: pd.DataFrame) -> list[MetricSamples]:
    if not len(samples):
        return []
    out = []
    scenarios = samples["scenario"].fillna("") if "scenario" in samples else ""
    grouped = samples.assign(scenario=scenarios).groupby(["scenario", "metric"], sort=False)
    for (scenario, metric), rows in grouped:
        scenario_name, metric_name = str(scenario), str(metric)
        name = f"{scenario_name}/{metric_name}" if scenario_name else metric_name
        direction = str(rows["direction"].iloc[0])
        unit = str(rows["unit"].iloc[0])
        values = rows["value"].to_numpy(dtype=float)
        out.append(MetricSamples(name, "median", values, direction, "micro", unit))
    return out


def training_samples(steps: pd.DataFrame) -> list[MetricSamples]:
    if not len(steps):
        return []
    whole = steps[steps["microbatch"].isna()]
    steps = whole if len(whole) else steps
    out = []
    for scenario, rows in steps.assign(scenario=steps["scenario"].fillna("")).groupby(
        "scenario", sort=False
    ):
        per_step = rows.groupby("step").agg(
            start_ns=("start_ns", "min"),
            end_ns=("end_ns", "max"),
            tokens=("tokens", "sum"),
            mfu=("mfu", "mean"),
        )
        step_time_s = (per_step["end_ns"] - per_step["start_ns"]).to_numpy(float) / NS_PER_S
        with np.errstate(divide="ignore", invalid="ignore"):
            tokens_per_s = per_step["tokens"].to_numpy(float) / step_time_s
        prefix = str(scenario) + "/" if scenario else ""
        out.append(
            MetricSamples(f"{prefix}step_time_s", "median", step_time_s, "lower", "training", "s")
        )
        out.append(
            MetricSamples(
                f"{prefix}tokens_per_s", "mean", tokens_per_s, "higher", "training", "tok/s"
            )
        )
        mfu = per_step["mfu"].to_numpy(float)
        if np.isfinite(mfu).any():
            out.append(MetricSamples(f"{prefix}mfu", "mean", mfu, "higher", "training", "1"))
    return out


def pool_samples(runs: Iterable[list[MetricSamples]]) -> list[MetricSamples]:
    """The samples of several runs of one side pooled per metric (paired blocks)."""
    pooled: dict[str, MetricSamples] = {}
    parts: dict[str, list[np.ndarray]] = {}
    for metrics in runs:
        for metric in metrics:
            pooled.setdefault(metric.key, metric)
            parts.setdefault(metric.key, []).append(metric.values)
    return [replace(m, values=np.concatenate(parts[key])) for key, m in pooled.items()]
