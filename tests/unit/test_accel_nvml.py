"""NvmlSource over recorded readings (a fake NVML library with the real pynvml's constants and
exceptions), and the real pynvml on this host."""

from __future__ import annotations

import ctypes
import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from moeperf.collectors.accel_records import Unavailable
from moeperf.collectors.sources.nvml_source import NvmlSource, open_nvml, reason_bits, reason_names

RECORDED = json.loads((Path(__file__).parents[1] / "data/accel/nvml_h200x2.json").read_text())
MiB = 1 << 20


class FakeNvml:
    """The functions NvmlSource calls, answering from the recorded ticks (``tick`` says which);
    pynvml's constants and exception classes come from the real module. ``fail`` makes a
    function raise an NVML error instead; ``lacks`` hides functions a driver may not have."""

    def __init__(self, recorded: dict[str, Any] = RECORDED, lacks: tuple[str, ...] = ()):
        self._recorded = recorded
        self._lacks = set(lacks)
        self.tick = 0
        self.fail: dict[str, type[pynvml.NVMLError]] = {}
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        if name.startswith(("NVML_", "NVMLError", "nvmlClocks")):
            return getattr(pynvml, name)
        raise AttributeError(name)

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("nvml") and name in object.__getattribute__(self, "_lacks"):
            raise AttributeError(name)
        return object.__getattribute__(self, name)

    def _answer(self, fn: str, value: Any) -> Any:
        self.calls.append(fn)
        if fn in self.fail:
            raise self.fail[fn]()
        return value

    def _reading(self, handle: int) -> dict[str, Any]:
        return self._recorded["ticks"][self.tick]["devices"][handle]

    def nvmlInit(self) -> None:
        self._answer("nvmlInit", None)

    def nvmlShutdown(self) -> None:
        self._answer("nvmlShutdown", None)

    def nvmlDeviceGetCount(self) -> int:
        return self._answer("nvmlDeviceGetCount", len(self._recorded["devices"]))

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return self._answer("nvmlDeviceGetHandleByIndex", index)

    def nvmlDeviceGetName(self, handle: int) -> str:
        return self._answer("nvmlDeviceGetName", self._recorded["devices"][handle]["name"])

    def nvmlDeviceGetUUID(self, handle: int) -> bytes:
        # pynvml 13 returns the UUID as bytes (the name as str).
        uuid = self._recorded["devices"][handle]["uuid"].encode()
        return self._answer("nvmlDeviceGetUUID", uuid)

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> SimpleNamespace:
        gpu = self._reading(handle)["utilization_gpu_pct"]
        return self._answer("nvmlDeviceGetUtilizationRates", SimpleNamespace(gpu=gpu, memory=0))

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        r = self._reading(handle)
        used, total = r["memory_used_bytes"], r["memory_total_bytes"]
        info = SimpleNamespace(used=used, total=total, free=total - used)
        return self._answer("nvmlDeviceGetMemoryInfo", info)

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        return self._answer("nvmlDeviceGetPowerUsage", self._reading(handle)["power_mw"])

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: int) -> int:
        energy = self._reading(handle)["energy_mj"]
        return self._answer("nvmlDeviceGetTotalEnergyConsumption", energy)

    def nvmlDeviceGetClockInfo(self, handle: int, clock: int) -> int:
        key = {pynvml.NVML_CLOCK_SM: "sm_clock_mhz", pynvml.NVML_CLOCK_MEM: "mem_clock_mhz"}
        return self._answer("nvmlDeviceGetClockInfo", self._reading(handle)[key[clock]])

    def nvmlDeviceGetTemperatureV(self, handle: int, sensor: int) -> int:
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        temperature = self._reading(handle)["temperature_c"]
        return self._answer("nvmlDeviceGetTemperatureV", temperature)

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        temperature = self._reading(handle)["temperature_c"]
        return self._answer("nvmlDeviceGetTemperature", temperature)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: int) -> int:
        mask = self._reading(handle)["clocks_event_reasons"]
        return self._answer("nvmlDeviceGetCurrentClocksEventReasons", mask)

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: int) -> int:
        mask = self._reading(handle)["clocks_event_reasons"]
        return self._answer("nvmlDeviceGetCurrentClocksThrottleReasons", mask)


def opened(fake: FakeNvml) -> NvmlSource:
    source = open_nvml(fake, host="gpu-node-7")
    assert isinstance(source, NvmlSource), source
    return source


def test_readings_are_mapped_and_converted_to_base_units() -> None:
    fake = FakeNvml()
    source = opened(fake)
    fake.tick = 2
    gpu0, gpu1 = source.read(123, "c=8")
    assert gpu0.t_ns == 123 and gpu0.scenario == "c=8" and gpu0.source == "nvml"
    assert (gpu0.device, gpu0.host, gpu0.name) == ("gpu0", "gpu-node-7", "NVIDIA H200")
    assert gpu0.uuid == "GPU-7c3e6a0f-1b52-4f0e-9d1a-2e8f5b6c9a01"  # bytes decoded
    assert gpu0.utilization_ratio == 1.0  # 100 %
    assert gpu0.memory_used_bytes == 131500 * MiB
    assert gpu0.memory_total_bytes == 143771 * MiB
    assert gpu0.power_w == pytest.approx(688.104)  # 688104 mW
    assert gpu0.energy_j == pytest.approx(48212098.470)  # 48212098470 mJ
    assert gpu0.sm_clock_hz == 1_830_000_000 and gpu0.memory_clock_hz == 3_201_000_000
    assert gpu0.temperature_c == 53.0
    assert gpu0.throttle_reasons == ("sw_power_cap",)
    assert gpu0.cpu_ratio is None and gpu0.rss_bytes is None and gpu0.engine_active_ratio is None
    assert gpu1.device == "gpu1" and gpu1.utilization_ratio == pytest.approx(0.84)
    assert gpu1.throttle_reasons == ("hw_slowdown", "hw_thermal_slowdown")


def test_throttle_bits_are_named_and_an_unknown_bit_is_kept() -> None:
    fake = FakeNvml()
    source = opened(fake)
    reasons = []
    for tick in range(4):
        fake.tick = tick
        reasons.append(source.read(0, "")[1].throttle_reasons)
    assert reasons == [
        ("gpu_idle",),
        (),  # nothing holds the clocks: empty, not None
        ("hw_slowdown", "hw_thermal_slowdown"),
        ("unknown_0x800",),
    ]


def test_reason_bits_come_from_the_real_pynvml_constants() -> None:
    bits = dict((name, bit) for bit, name in reason_bits(pynvml))
    assert bits["sw_power_cap"] == pynvml.nvmlClocksThrottleReasonSwPowerCap == 0x4
    assert bits["hw_power_brake_slowdown"] == 0x80 and bits["board_limit"] == 0x200
    assert "user_defined_clocks" not in bits and len(bits) == 11
    assert reason_names(0x4 | 0x1 | 0x1000, reason_bits(pynvml)) == (
        "gpu_idle",
        "sw_power_cap",
        "unknown_0x1000",
    )


def test_energy_not_supported_is_none_and_the_rest_is_read() -> None:
    fake = FakeNvml()
    fake.fail["nvmlDeviceGetTotalEnergyConsumption"] = pynvml.NVMLError_NotSupported
    sample = opened(fake).read(0, "")[0]
    assert sample.energy_j is None
    assert sample.power_w == pytest.approx(198.512) and sample.utilization_ratio == 0.35


def test_one_failing_call_leaves_the_other_fields() -> None:
    fake = FakeNvml()
    source = opened(fake)
    fake.fail["nvmlDeviceGetPowerUsage"] = pynvml.NVMLError_GpuIsLost
    fake.fail["nvmlDeviceGetClockInfo"] = pynvml.NVMLError_Unknown
    sample = source.read(0, "")[0]
    assert sample.power_w is None and sample.sm_clock_hz is None and sample.memory_clock_hz is None
    assert sample.energy_j == pytest.approx(48212000.0) and sample.temperature_c == 44.0
    assert sample.memory_used_bytes == 71000 * MiB and sample.throttle_reasons == ()


def test_an_older_driver_falls_back_to_the_deprecated_calls() -> None:
    # A driver without nvmlDeviceGetTemperatureV: the new binding raises FunctionNotFound.
    fake = FakeNvml(lacks=("nvmlDeviceGetCurrentClocksEventReasons",))
    fake.fail["nvmlDeviceGetTemperatureV"] = pynvml.NVMLError_FunctionNotFound
    fake.tick = 2
    sample = opened(fake).read(0, "")[0]
    assert sample.temperature_c == 53.0 and sample.throttle_reasons == ("sw_power_cap",)
    assert "nvmlDeviceGetTemperature" in fake.calls
    assert "nvmlDeviceGetCurrentClocksThrottleReasons" in fake.calls


def test_close_shuts_nvml_down() -> None:
    fake = FakeNvml()
    opened(fake).close()
    assert fake.calls.count("nvmlInit") == 1 and fake.calls[-1] == "nvmlShutdown"


def test_init_failing_is_unavailable_with_the_reason() -> None:
    fake = FakeNvml()
    fake.fail["nvmlInit"] = pynvml.NVMLError_DriverNotLoaded
    result = open_nvml(fake)
    assert isinstance(result, Unavailable)
    assert "Driver Not Loaded" in result.reason and "NVMLError_DriverNotLoaded" in result.reason


def test_no_gpu_is_unavailable_and_nvml_is_shut_down() -> None:
    fake = FakeNvml({"devices": [], "ticks": []})
    assert open_nvml(fake) == Unavailable("NVML: no GPU found")
    assert fake.calls[-1] == "nvmlShutdown"


def test_missing_package_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    result = open_nvml()
    assert isinstance(result, Unavailable) and "nvidia-ml-py is not installed" in result.reason


def _driver_present() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")  # what pynvml loads on Linux
    except OSError:
        return False
    return True


def test_the_real_pynvml_on_this_host() -> None:
    """Without a driver (this machine): Unavailable with NVML's reason, no exception. With one
    (a GPU host): a source whose read gives every GPU's power."""
    result = open_nvml()
    if not _driver_present():
        assert isinstance(result, Unavailable)
        assert "NVML Shared Library Not Found" in result.reason
        return
    assert isinstance(result, NvmlSource)
    try:
        samples = result.read(0, "")
        assert samples and all(s.power_w is not None and s.power_w > 0 for s in samples)
        assert all(s.memory_total_bytes for s in samples)
    finally:
        result.close()
