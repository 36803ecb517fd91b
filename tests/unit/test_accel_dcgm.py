"""The DCGM exporter dialect: a recorded page read into one sample per GPU, in base units."""

from __future__ import annotations

from pathlib import Path

import pytest

from moeperf.collectors.sources.dcgm_dialect import dcgm_samples
from moeperf.collectors.sources.dcgm_source import metrics_url
from moeperf.collectors.sources.target_metrics import parse_exposition

DATA = Path(__file__).parents[1] / "data/accel"
MiB = 1 << 20


def read(text: str, default_host: str = "10.0.0.7") -> list:
    return dcgm_samples(parse_exposition(text), 42, "c=4", default_host)


def test_a_recorded_exporter_page_gives_a_sample_per_gpu() -> None:
    gpu0, gpu1 = read((DATA / "dcgm_exporter_h200x2.prom").read_text())
    assert (gpu0.source, gpu0.device, gpu0.host) == ("dcgm", "gpu-node-7:gpu0", "gpu-node-7")
    assert gpu0.name == "NVIDIA H200" and gpu0.uuid == "GPU-7c3e6a0f-1b52-4f0e-9d1a-2e8f5b6c9a01"
    assert gpu0.t_ns == 42 and gpu0.scenario == "c=4"
    assert gpu0.utilization_ratio == pytest.approx(0.97)
    assert gpu0.engine_active_ratio == pytest.approx(0.873145)
    assert gpu0.memory_used_bytes == 132398 * MiB
    assert gpu0.memory_total_bytes == (132398 + 10843 + 530) * MiB  # used + free + reserved
    assert gpu0.power_w == pytest.approx(612.345)
    assert gpu0.energy_j == pytest.approx(48213370.544)  # mJ counter, past 2^31
    assert gpu0.sm_clock_hz == 1_980_000_000 and gpu0.memory_clock_hz == 3_201_000_000
    assert gpu0.temperature_c == 52.0
    assert gpu0.throttle_reasons is None  # not among the exporter's default counters
    assert gpu1.device == "gpu-node-7:gpu1" and gpu1.sm_clock_hz == 1_755_000_000


def line(series: str, value: str, gpu: str = "0", **labels: str) -> str:
    """One series line as dcgm-exporter renders it (fixed labels first)."""
    fixed = {"gpu": gpu, "UUID": f"GPU-{gpu}", "device": f"nvidia{gpu}", "modelName": "H200"}
    body = ",".join(f'{k}="{v}"' for k, v in {**fixed, **labels}.items())
    return f"{series}{{{body}}} {value}\n"


def test_blank_values_are_none_and_a_page_without_hostname_uses_the_url_host() -> None:
    page = (
        "# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"
        + line("DCGM_FI_DEV_GPU_TEMP", "9223372036854775794")  # DCGM_INT64_NOT_SUPPORTED
        + "# TYPE DCGM_FI_DEV_POWER_USAGE gauge\n"
        + line("DCGM_FI_DEV_POWER_USAGE", "140737488355328")  # DCGM_FP64_BLANK
        + "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
        + line("DCGM_FI_DEV_GPU_UTIL", "12")
    )
    (gpu,) = read(page)
    assert gpu.host == "10.0.0.7" and gpu.device == "10.0.0.7:gpu0"
    assert gpu.temperature_c is None and gpu.power_w is None and gpu.energy_j is None
    assert gpu.utilization_ratio == pytest.approx(0.12) and gpu.memory_total_bytes is None


def test_mig_instances_are_devices_of_their_own() -> None:
    mig = {"GPU_I_PROFILE": "1g.18gb", "Hostname": "n2"}  # Hostname: older releases' spelling
    page = (
        "# TYPE DCGM_FI_DEV_FB_USED gauge\n"
        + line("DCGM_FI_DEV_FB_USED", "100", GPU_I_ID="7", **mig)
        + line("DCGM_FI_DEV_FB_USED", "200", GPU_I_ID="8", **mig)
        + line("DCGM_FI_DEV_FB_USED", "300", gpu="10", Hostname="n2")
        + line("DCGM_FI_DEV_FB_USED", "400", gpu="2", Hostname="n2")
    )
    samples = read(page)
    assert [s.device for s in samples] == ["n2:gpu0/mig7", "n2:gpu0/mig8", "n2:gpu2", "n2:gpu10"]
    assert [s.memory_used_bytes for s in samples] == [m * MiB for m in (100, 200, 400, 300)]


def test_a_node_exporter_page_has_no_dcgm_series() -> None:
    assert read((DATA / "node_exporter.prom").read_text()) == []


def test_metrics_url() -> None:
    assert metrics_url("http://node1:9400") == "http://node1:9400/metrics"
    assert metrics_url("http://node1:9400/") == "http://node1:9400/metrics"
    assert metrics_url("http://node1:9400/custom") == "http://node1:9400/custom"
