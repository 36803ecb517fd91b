"""Energy per output token as a gate metric: per-slice samples, and the gate judging them."""

from __future__ import annotations

import numpy as np
import pytest

from moeperf.collectors.accel_records import DeviceSample
from moeperf.collectors.interference_records import InterferenceArm, InterferenceSummary
from moeperf.collectors.records import RequestRecord
from moeperf.collectors.serving_records import ServingSummary
from moeperf.collectors.store import RunStore
from moeperf.collectors.tables import SCHEMAS, records_frame, table_to_frame
from moeperf.reports.energy_samples import MIN_SLICES, energy_per_token_slices
from moeperf.reports.gate import gate
from moeperf.reports.runs import RunData
from moeperf.reports.samples import energy_samples, run_samples

S = 1_000_000_000
MS = 1_000_000


def requests(seconds: int, tokens_per_s: int, scenario: str = "c=4"):
    """One ok request per 100 ms, each streaming ``tokens_per_s / 10`` one-token chunks
    within its 100 ms: ``tokens_per_s`` output tokens arrive in every whole second."""
    per_request = tokens_per_s // 10
    records = []
    for i in range(seconds * 10):
        t = i * 100 * MS
        chunks = [t + 1 * MS + k * (90 * MS // per_request) for k in range(per_request)]
        records.append(
            RequestRecord(
                request_id=f"r{i}",
                scenario=scenario,
                phase="measure",
                worker=0,
                intended_send_ns=t,
                send_ns=t,
                done_ns=t + 99 * MS,
                status="ok",
                chunk_ns=chunks,
                chunk_tokens=[1] * per_request,
                first_token_ns=chunks[0],
                last_token_ns=chunks[-1],
                output_tokens=per_request,
            )
        )
    return records_frame(records)


def gpu(seconds: int, power_w: float, noise: float = 0.0, seed: int = 0) -> list[DeviceSample]:
    """A GPU sampled every 100 ms at ``power_w`` (no energy counter: the power integral)."""
    rng = np.random.default_rng(seed)
    return [
        DeviceSample(
            t_ns=k * 100 * MS,
            source="nvml",
            device="gpu0",
            name="H200",
            host="h",
            utilization_ratio=0.9,
            power_w=power_w * (1 + noise * rng.standard_normal()),
            scenario="c=4",
        )
        for k in range(seconds * 10 + 1)
    ]


def test_each_whole_second_gives_its_joules_over_its_tokens():
    # 500 W and 1,000 tokens a second: 0.5 J per token in every slice.
    slices = energy_per_token_slices(requests(10, 1000), gpu(10, 500.0))
    values = slices["c=4"]
    assert len(values) >= MIN_SLICES
    assert values == pytest.approx(np.full(len(values), 0.5), rel=1e-6)
    (metric,) = energy_samples(requests(10, 1000), gpu(10, 500.0))
    assert metric.key == "c=4/energy_per_output_token_j median"
    assert metric.point == pytest.approx(0.5)
    assert (metric.direction, metric.metric_class, metric.kind) == ("lower", "energy", "optional")


def test_without_an_accelerator_there_is_no_energy_metric():
    process_only = [
        DeviceSample(
            t_ns=k * S,
            source="process",
            device="pid:1",
            host="h",
            cpu_ratio=0.5,
            rss_bytes=2**20,
            scenario="c=4",
        )
        for k in range(10)
    ]
    assert energy_samples(requests(10, 1000), process_only) == []
    assert energy_samples(requests(10, 1000), []) == []


def test_the_gate_fails_more_energy_per_token_and_passes_the_same():
    baseline = energy_samples(requests(20, 1000), gpu(20, 500.0, noise=0.02, seed=1))
    same = energy_samples(requests(20, 1000), gpu(20, 500.0, noise=0.02, seed=2))
    worse = energy_samples(requests(20, 1000), gpu(20, 650.0, noise=0.02, seed=3))
    (unchanged,) = gate(same, baseline).verdicts
    (regressed,) = gate(worse, baseline).verdicts
    assert unchanged.outcome == "no change"
    assert regressed.outcome == "regression"
    assert regressed.ratio == pytest.approx(1.3, rel=0.02)
    # A candidate without an accelerator lacks the metric: optional, not a failure.
    (missing,) = gate([], baseline).verdicts
    assert missing.outcome == "optional, missing from candidate"


def test_an_interference_run_has_no_energy_metric(tmp_path):
    """Its mixed level's two scenarios share every second: a second's joules cannot be split
    between them (the summary's figures are per level instead)."""
    with RunStore(tmp_path).create("serving") as run:
        manifest = run.manifest
    arm = InterferenceArm(0, "chunk=0 quiet", "chunk=0 decode", "chunk=0 prefill")
    interference = InterferenceSummary(4, 64, 128, 1536, 2.0, 8.0, 1540, (arm,))

    def data(summary: ServingSummary) -> RunData:
        return RunData(
            manifest=manifest,
            requests=requests(10, 1000),
            steps=table_to_frame("steps", SCHEMAS["steps"].empty_table()),
            summary=summary,
            server_metrics=[],
            samples=table_to_frame("samples", SCHEMAS["samples"].empty_table()),
            accelerator=tuple(gpu(10, 500.0)),
        )

    def energy_keys(summary: ServingSummary) -> list[str]:
        return [m.key for m in run_samples(data(summary)) if "energy" in m.key]

    assert energy_keys(ServingSummary()) == ["c=4/energy_per_output_token_j median"]
    assert energy_keys(ServingSummary(interference=interference)) == []
    assert list(ServingSummary(interference=interference).accelerator_levels()) == [
        "chunk=0 quiet",
        "chunk=0 mixed",
    ]
