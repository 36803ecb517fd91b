"""The gate's metric classes and their default minimum effects.

They live in the bottom layer because two packages that may not import each other read
them: the serving spec's ``[gate]`` table (suites/spec.py validates its keys against
``MIN_EFFECT_KEYS`` before any load is sent) and the gate itself (reports/stats.py).

A metric's class decides its minimum effect: the smallest relative change the gate calls
material, whatever its significance. A key is a class ("latency") or a class and the
statistic it is compared by, joined by "_" ("latency_p99"); the longer key wins.
"""

from __future__ import annotations

from collections.abc import Mapping

# "latency": TTFT, TPOT, ITL, E2E; "throughput": output tokens/s; "micro": micro-benchmark
# medians; "training": step time, tokens/s, MFU; "cache": the cached share of prompts;
# "energy": the accelerators' energy per output token; "harness": the harness's own
# measurement error against a target that stamps its own times (the synthetic target).
METRIC_CLASSES = ("latency", "throughput", "micro", "training", "cache", "energy", "harness")

# Latency and throughput: 5%, about the run-to-run spread of medians in short serving runs;
# micro-benchmarks are noisier (caches, turbo, scheduling): 10%. Tail percentiles vary far
# more from run to run than within a run, which no test on one run's samples can see: A/A
# runs on the 2-core development host (moeperf.gate_calibration, 12 pairs at 4 and 16
# streams, both orders) flagged ITL p99 in 5 of 24 comparisons with a 5% minimum effect, 1 of
# 24 with 20%. Calibrate on your own host (``moeperf gate calibrate`` suggests a minimum
# effect per metric) and set the largest for each class in the spec's [gate] table.
DEFAULT_MIN_EFFECTS: Mapping[str, float] = {
    "latency": 0.05,
    "latency_p99": 0.20,
    "throughput": 0.05,
    "micro": 0.10,
    "training": 0.05,
    # The share of prompt tokens served from the prefix cache: 5%, as throughput (the
    # share of a seeded workload moves little between runs; a broken cache moves it all).
    "cache": 0.05,
    # Energy per output token: 5%, as throughput, which it follows at a steady power draw
    # (not calibrated on a GPU yet: no A/A runs with one have been made).
    "energy": 0.05,
    # The harness's total TTFT error p50: 100%, a doubling. It is a fraction of a
    # millisecond that the host's scheduling moves by up to 1.5x between calibrations of one
    # commit (0.55 to 0.82 ms at 16 streams on the 2-core development host), while the
    # regressions it is there for (a send path that queues, a loop that stalls) add
    # milliseconds.
    "harness": 1.0,
}

# One serving metric by the statistic the gate compares it by ("ttft_s_p99"), at every
# level: tails differ in how much they move between runs (TTFT and TPOT p99 of the nightly
# spec's 480 requests stay within a few percent in A/A runs, ITL p99 per token moves with
# the host's scheduling), so a spec may set one without loosening the others.
METRIC_KEYS = (
    "ttft_s_p50",
    "ttft_s_p99",
    "tpot_s_p50",
    "tpot_s_p99",
    "itl_s_p50",
    "itl_s_p99",
    "e2e_s_p50",
    "request_output_tok_s_mean",
    "cached_prompt_share_mean",
    "energy_per_output_token_j_median",
    "harness_ttft_error_s_p50",
)

# The keys a spec's ``[gate] min_effects`` (and ``moeperf gate --min-effect``) may set:
# every class, latency by the two percentiles the serving gate compares (p50 and p99), and
# each serving metric by its statistic. The most specific key wins: metric, then class and
# statistic, then class.
MIN_EFFECT_KEYS = (
    "latency",
    "latency_p50",
    "latency_p99",
    "throughput",
    "micro",
    "training",
    "cache",
    "energy",
    "harness",
    *METRIC_KEYS,
)
