"""accelerator.jsonl -> accelerator.parquet through RunWriter / RunReader: every field,
None included, reads back as written."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from moeperf.collectors.accel_records import DeviceSample
from moeperf.collectors.store import RunStore
from moeperf.collectors.tables import rows_to_table

GPU = DeviceSample(
    t_ns=100_000_000,
    source="nvml",
    device="gpu0",
    name="NVIDIA H200",
    host="gpu-node-7",
    utilization_ratio=0.97,
    memory_used_bytes=132398 << 20,
    memory_total_bytes=143771 << 20,
    power_w=612.345,
    energy_j=48212163.292,
    sm_clock_hz=1_980_000_000,
    memory_clock_hz=3_201_000_000,
    temperature_c=52.0,
    throttle_reasons=("sw_power_cap", "hw_slowdown"),
    cpu_ratio=None,
    rss_bytes=None,
    scenario="c=8",
    uuid="GPU-7c3e6a0f-1b52-4f0e-9d1a-2e8f5b6c9a01",
)
# Mostly unknown: every None must come back None (not NaN, not 0), and () stay ().
BARE = DeviceSample(
    t_ns=200_000_000,
    source="dcgm",
    device="node1:gpu1",
    name=None,
    host="node1",
    utilization_ratio=None,
    memory_used_bytes=None,
    memory_total_bytes=None,
    power_w=None,
    energy_j=None,
    sm_clock_hz=None,
    memory_clock_hz=None,
    temperature_c=None,
    throttle_reasons=(),
    cpu_ratio=None,
    rss_bytes=None,
    scenario="",
    engine_active_ratio=0.5,
)
PROCESS = DeviceSample(
    t_ns=300_000_000,
    source="process",
    device="pid:4242",
    name="python3",
    host="localhost",
    utilization_ratio=None,
    memory_used_bytes=None,
    memory_total_bytes=None,
    power_w=None,
    energy_j=None,
    sm_clock_hz=None,
    memory_clock_hz=None,
    temperature_c=None,
    throttle_reasons=None,
    cpu_ratio=2.5,
    rss_bytes=1 << 30,
    scenario="c=8",
)
SAMPLES = [GPU, BARE, PROCESS]


def test_rows_to_table_knows_the_accelerator_kind() -> None:
    table = rows_to_table("accelerator", [s.to_dict() for s in SAMPLES])
    assert table.num_rows == 3
    assert table.column("throttle_reasons").to_pylist() == [
        ["sw_power_cap", "hw_slowdown"],
        [],
        None,
    ]


def test_samples_read_back_while_running_and_after_the_end(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    run = store.create("serving")
    for sample in SAMPLES:
        run.append_device_sample(sample)
    assert (run.directory / "accelerator.jsonl").exists()
    assert store.open(run.run_id).accelerator_samples() == SAMPLES  # from the JSONL

    run.complete()
    parquet = run.directory / "accelerator.parquet"
    assert parquet.exists() and not (run.directory / "accelerator.jsonl").exists()
    assert pq.read_table(parquet).num_rows == 3
    assert store.open(run.run_id).accelerator_samples() == SAMPLES  # from the parquet


def test_a_run_without_samples_reads_none(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    run = store.create("serving")
    run.complete()
    assert store.open(run.run_id).accelerator_samples() == []
