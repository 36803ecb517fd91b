"""The raw samples the gate compares, per metric, derived from one run's records.

A ``MetricSamples`` is one metric of one run: the raw samples and the statistic the gate
compares (a percentile, the mean or the median of them, or a rate of totals), which way is
better, and the class that sets its minimum effect. What is derived, exactly:

Serving runs (requests of the "measure" phase; latencies come from ``collectors.latency``
and the throughput from ``collectors.summary``'s definitions, never redefined here), per
scenario (load level):
- ``ttft_s`` p50 and p99, ``tpot_s`` p50 and p99, ``itl_s`` p50 and p99 (one sample per
  token), ``e2e_s`` p50, of the ok requests: lower is better, class "latency".
- ``request_output_tok_s`` mean: the per-request output rate, output tokens / (done -
  send) of each ok request: how fast one stream's requests deliver tokens, the whole time
  they hold the stream (prefill, queueing and decode). One sample per request; higher is
  better, class "throughput". This is the throughput the gate judges: with c streams kept
  busy, c x this rate is the level's steady output throughput (Little's law). It is not
  the headline below and is never labelled as it.
- ``output_tok_s tokens/window``: the headline output tokens/s of the run summary, output
  tokens of the ok requests / the measured window (first actual send -> last completion
  of the measured requests, failed ones included): the same number in the summary, the
  tables, the report, ``moeperf compare`` and the gate. Reported, never tested
  (``kind`` "reported"): one number per level, whose spread between runs (where the
  window's ends fall on the requests) one run cannot show (``reports.stats``).
- ``turn{k}/ttft_s`` p50 of a multi-turn scenario ("c=4/turn2/ttft_s"): the TTFT of the
  ok requests at turn k of their conversation; lower is better, class "latency".
- ``cached_prompt_share`` mean: per ok request, the prompt tokens the server's prefix cache
  held (its usage's ``prompt_tokens_details.cached_tokens``) / its prompt tokens; higher is
  better, class "cache". Only where some request of the level had cached tokens: a level
  that shares no prefix has no share to compare (a ratio of zeros), while a candidate whose
  cache stopped hitting lacks the metric the baseline has, which fails as missing.
  Error ratio is not a gate metric: failures are counts, not samples, and need a binomial
  comparison rather than these tests.
- ``energy_per_output_token_j`` median, where the run sampled an accelerator
  ([telemetry]): ``reports.energy_samples`` says how. Not for a prefill-interference
  run: its mixed level's two scenarios share every second.

Micro runs (suite "micro"): the samples table, one sample per round, compared by their
median; direction and unit from the records; class "micro".

Training runs (the steps table): per scenario, whole-step records (micro-batch records are
used only when there are no whole-step ones), one sample per step: the step time (the
slowest rank, first start to last end) by median, lower is better; tokens per second (all
ranks' tokens / step time) by mean, higher is better; MFU (mean over ranks) by mean,
higher is better; class "training".
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np
import pandas as pd

from moeperf.collectors.accel_records import DeviceSample
from moeperf.collectors.latency import (
    NS_PER_S,
    itl_samples_s,
    per_request,
    request_output_rates,
)
from moeperf.collectors.serving_records import ServingSummary
from moeperf.registry import find_suite
from moeperf.reports.energy_samples import energy_per_token_slices
from moeperf.reports.runs import RunData
from moeperf.reports.stats import RATE_STATISTIC, point_value, rate_of_totals

MetricKind = Literal["required", "optional", "reported"]

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
    statistic: str  # "p50", "p99", "mean", "median" or "tokens/window"
    values: np.ndarray = field(repr=False)
    direction: str  # "lower" or "higher" is better
    metric_class: (
        str  # "latency", "throughput", "micro", "training", "cache" (collectors.min_effects)
    )
    unit: str
    # "tokens/window" only: the level's measured window (``values`` are output tokens).
    window_s: float = 0.0
    # "required": judged, and missing from the candidate is a failure; "optional": judged,
    # but a run may lack it by definition (MFU needs the device's peak FLOP/s); "reported":
    # shown with both values, never tested (the headline output tokens/s).
    kind: MetricKind = "required"
    # The load level (serving) or scenario (training) it belongs to; "" for micro runs.
    level: str = ""

    def __post_init__(self) -> None:
        values = np.asarray(self.values, dtype=float)
        object.__setattr__(self, "values", values[np.isfinite(values)])
        if self.statistic == RATE_STATISTIC and self.kind != "reported":
            raise ValueError(f"{self.name}: {RATE_STATISTIC} is reported, never tested")
        if self.direction not in ("lower", "higher"):
            raise ValueError(f"{self.name}: direction must be 'lower' or 'higher'")

    @property
    def key(self) -> str:
        """How the metric is named in tables and gate.json: "c=16/ttft_s p99"."""
        return f"{self.name} {self.statistic}"

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def point(self) -> float:
        """The compared statistic of the samples (NaN without samples)."""
        if not self.n:
            return math.nan
        if self.statistic == RATE_STATISTIC:
            return rate_of_totals(self.values, self.window_s)
        return point_value(self.values, self.statistic)


def run_samples(run: RunData) -> list[MetricSamples]:
    """Every gate metric of a run (a ``reports.runs.RunData``): its suite's gate samples
    (the suite registry names them); none for a suite without gate metrics."""
    suite = find_suite(run.kind)
    if suite is None or suite.gate_samples is None:
        return []
    return suite.gate_samples.load()(run)


def micro_run_samples(run: RunData) -> list[MetricSamples]:
    """A micro run's gate metrics: each benchmark's rounds."""
    return micro_samples(run.samples)


def training_run_samples(run: RunData) -> list[MetricSamples]:
    """A training run's gate metrics: its steps' figures per scenario."""
    return training_samples(run.steps)


def serving_run_samples(run: RunData) -> list[MetricSamples]:
    """A serving run's gate metrics: per-level request figures, and energy per output
    token where the run sampled accelerators."""
    if isinstance(run.summary, ServingSummary) and run.summary.interference is not None:
        # An interference level's two scenarios share every second: a second's energy
        # cannot be split between them (its figures are per level, in the summary).
        return serving_samples(run.requests)
    return (
        serving_samples(run.requests)
        + energy_samples(run.requests, run.accelerator)
        + harness_error_samples(run.harness_errors)
    )


def harness_error_samples(errors: pd.DataFrame) -> list[MetricSamples]:
    """The harness's own total TTFT error of each level, where the target stamped its own
    times (the synthetic target): optional, as a run against any other lacks it."""
    if not len(errors):
        return []
    return [
        MetricSamples(
            f"{scenario}/harness_ttft_error_s",
            "p50",
            level["ttft_total_s"].to_numpy(dtype=float),
            "lower",
            "harness",
            "s",
            kind="optional",
            level=str(scenario),
        )
        for scenario, level in errors.groupby("scenario", sort=False)
    ]


def energy_samples(
    requests: pd.DataFrame, accelerator: Sequence[DeviceSample]
) -> list[MetricSamples]:
    """Energy per output token of each level, where the run sampled an accelerator
    (``reports.energy_samples``): optional, as a run without one lacks it by definition."""
    return [
        MetricSamples(
            f"{scenario}/energy_per_output_token_j",
            "median",
            values,
            "lower",
            "energy",
            "J/token",
            kind="optional",
            level=scenario,
        )
        for scenario, values in energy_per_token_slices(requests, accelerator).items()
    ]


def serving_samples(requests: pd.DataFrame) -> list[MetricSamples]:
    if not len(requests):
        return []
    measured = requests[requests["phase"] == "measure"]
    out: list[MetricSamples] = []
    for scenario in dict.fromkeys(requests["scenario"]):
        level = measured[measured["scenario"] == scenario]
        rows = level[level["status"] == "ok"]
        metrics = per_request(rows)
        columns = {n: metrics[n].to_numpy(dtype=float) for n in ("ttft_s", "tpot_s", "e2e_s")}
        columns["itl_s"] = itl_samples_s(rows)["itl_s"].to_numpy(dtype=float)
        for name, statistics in _SERVING_LATENCIES:
            for statistic in statistics:
                out.append(
                    MetricSamples(
                        f"{scenario}/{name}",
                        statistic,
                        columns[name],
                        "lower",
                        "latency",
                        "s",
                        level=str(scenario),
                    )
                )
        out.append(request_output_rate(str(scenario), rows))
        out.append(output_throughput(str(scenario), level))
        out += _workload_samples(str(scenario), rows, metrics)
    return out


def _workload_samples(
    scenario: str, ok: pd.DataFrame, metrics: pd.DataFrame
) -> list[MetricSamples]:
    """TTFT by conversation turn, and the cached share of prompts (the module docstring)."""
    out = []
    if "turn" in ok and ok["turn"].notna().any():
        turns = ok["turn"].to_numpy()
        ttft = metrics["ttft_s"].to_numpy(dtype=float)
        for turn in sorted({int(t) for t in turns[pd.notna(turns)]}):
            out.append(
                MetricSamples(
                    f"{scenario}/turn{turn}/ttft_s",
                    "p50",
                    ttft[turns == turn],
                    "lower",
                    "latency",
                    "s",
                    level=scenario,
                )
            )
    if "cached_prompt_tokens" in ok:
        told = ok.dropna(subset=["cached_prompt_tokens", "prompt_tokens"])
        told = told[told["prompt_tokens"] > 0]
        share = (told["cached_prompt_tokens"] / told["prompt_tokens"]).to_numpy(dtype=float)
        if (share > 0).any():
            out.append(
                MetricSamples(
                    f"{scenario}/cached_prompt_share",
                    "mean",
                    share,
                    "higher",
                    "cache",
                    "ratio",
                    level=scenario,
                )
            )
    return out


def request_output_rate(scenario: str, ok: pd.DataFrame) -> MetricSamples:
    """Output tokens / (done - send) of each ok request (the module docstring)."""
    return MetricSamples(
        f"{scenario}/request_output_tok_s", "mean", request_output_rates(ok), "higher",
        "throughput", "tok/s", level=scenario,
    )  # fmt: skip


def output_throughput(scenario: str, level: pd.DataFrame) -> MetricSamples:
    """Output tokens of the ok requests / the measured window, as ``collectors.summary``
    defines it (the summary's ``output_throughput_tok_s``): reported, never tested."""
    ok = (level["status"] == "ok").to_numpy()
    tokens = per_request(level)["output_tokens"].to_numpy(dtype=float)
    tokens = np.where(ok & np.isfinite(tokens), tokens, 0.0)  # the summary's sum skips NaN
    window_s = 0.0
    if len(level):
        window_s = float(level["done_ns"].max() - level["send_ns"].min()) / NS_PER_S
    return MetricSamples(
        f"{scenario}/output_tok_s",
        RATE_STATISTIC,
        tokens,
        "higher",
        "throughput",
        "tok/s",
        window_s=window_s,
        kind="reported",
        level=scenario,
    )


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
        level = str(scenario)
        out.append(
            MetricSamples(
                f"{prefix}step_time_s", "median", step_time_s, "lower", "training", "s",
                level=level,
            )
        )  # fmt: skip
        out.append(
            MetricSamples(
                f"{prefix}tokens_per_s", "mean", tokens_per_s, "higher", "training", "tok/s",
                level=level,
            )
        )  # fmt: skip
        mfu = per_step["mfu"].to_numpy(float)
        if np.isfinite(mfu).any():
            out.append(
                MetricSamples(
                    f"{prefix}mfu", "mean", mfu, "higher", "training", "1",
                    kind="optional", level=level,
                )
            )  # fmt: skip
    return out


def pool_samples(runs: Iterable[list[MetricSamples]]) -> list[MetricSamples]:
    """The samples of several runs of one side pooled per metric (paired blocks); a
    "tokens/window" metric adds up the windows too (total tokens over total measured time)."""
    pooled: dict[str, MetricSamples] = {}
    parts: dict[str, list[MetricSamples]] = {}
    for metrics in runs:
        for metric in metrics:
            pooled.setdefault(metric.key, metric)
            parts.setdefault(metric.key, []).append(metric)
    out = []
    for key, first in pooled.items():
        blocks = parts[key]
        values = np.concatenate([m.values for m in blocks])
        out.append(replace(first, values=values, window_s=sum(m.window_s for m in blocks)))
    return out
