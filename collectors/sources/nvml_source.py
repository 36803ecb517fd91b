"""The local GPUs through NVML (``pynvml``, from the ``nvidia-ml-py`` package: ``moeperf[gpu]``).

``open_nvml()`` gives an ``NvmlSource`` or ``Unavailable`` with the reason (package not
installed, no NVML library, driver not loaded, no GPU); it never raises for a host without
GPUs. ``NvmlSource`` takes the NVML module as a parameter: tests pass a fake with the same
functions, over the real module's constants and exceptions.

What each field is read from, per device (NVML's unit -> ours):
- ``utilization_ratio``: ``nvmlDeviceGetUtilizationRates(h).gpu`` (% of the last sample
  period, 1/6 s to 1 s depending on the GPU, during which a kernel ran) / 100.
- ``memory_used_bytes`` / ``memory_total_bytes``: ``nvmlDeviceGetMemoryInfo(h)`` (v1: used
  includes the driver's reserved memory).
- ``power_w``: ``nvmlDeviceGetPowerUsage`` (mW) / 1000.
- ``energy_j``: ``nvmlDeviceGetTotalEnergyConsumption`` (mJ since the driver loaded; Volta
  and newer) / 1000.
- ``sm_clock_hz`` / ``memory_clock_hz``: ``nvmlDeviceGetClockInfo`` (MHz) x 1e6.
- ``temperature_c``: ``nvmlDeviceGetTemperatureV`` (the deprecated ``nvmlDeviceGetTemperature``
  where the driver lacks it), GPU sensor.
- ``throttle_reasons``: ``nvmlDeviceGetCurrentClocksEventReasons`` (the deprecated
  ``...ThrottleReasons`` where the driver lacks it), its bits named as NVML's constants.
A call that raises ``NVMLError`` (NotSupported on an older GPU, a lost GPU) leaves that field
None and the read goes on.
"""

from __future__ import annotations

import contextlib
import re
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from moeperf.collectors.accel_records import DeviceSample, Unavailable

# NVML's clock event (throttle) reason constants, by the suffix after
# nvmlClocksEventReason / nvmlClocksThrottleReason. UserDefinedClocks is an alias of
# ApplicationsClocksSetting; None and All are not reasons.
_REASON_SUFFIXES = (
    "GpuIdle", "ApplicationsClocksSetting", "SwPowerCap", "HwSlowdown", "SyncBoost",
    "SwThermalSlowdown", "HwThermalSlowdown", "HwPowerBrakeSlowdown", "DisplayClockSetting",
    "BoardLimit", "Reliability",
)  # fmt: skip


def _snake(camel: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", camel).lower()  # SwPowerCap -> sw_power_cap


def reason_bits(nvml: Any) -> tuple[tuple[int, str], ...]:
    """(bit, name) of every clock event reason the NVML module defines a constant for."""
    bits = []
    for suffix in _REASON_SUFFIXES:
        for prefix in ("nvmlClocksEventReason", "nvmlClocksThrottleReason"):
            value = getattr(nvml, prefix + suffix, None)
            if isinstance(value, int) and value:
                bits.append((value, _snake(suffix)))
                break
    return tuple(bits)


def reason_names(mask: int, bits: Sequence[tuple[int, str]]) -> tuple[str, ...]:
    """The names of the bits set in ``mask``; a bit NVML has no constant for is kept as
    "unknown_0x..." rather than dropped."""
    names = [name for bit, name in bits if mask & bit]
    rest = mask
    for bit, _ in bits:
        rest &= ~bit
    names += [f"unknown_{1 << i:#x}" for i in range(rest.bit_length()) if rest >> i & 1]
    return tuple(names)


@dataclass(frozen=True, slots=True)
class _Device:
    index: int
    handle: Any
    name: str | None
    uuid: str | None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlSource:
    """Reads every GPU NVML sees. NVML must be initialised (``open_nvml`` does it); ``close``
    shuts it down."""

    name = "nvml"

    def __init__(self, nvml: Any, host: str | None = None):
        # ``nvml``: the pynvml module, or an object with its functions, constants and
        # exceptions (tests).
        self._nvml = nvml
        self.host = host or socket.gethostname()
        self._bits = reason_bits(nvml)
        self._devices = tuple(
            self._device(i, nvml.nvmlDeviceGetHandleByIndex(i))
            for i in range(nvml.nvmlDeviceGetCount())
        )

    def _device(self, index: int, handle: Any) -> _Device:
        name = self._call(self._nvml.nvmlDeviceGetName, handle)
        uuid = self._call(self._nvml.nvmlDeviceGetUUID, handle)
        return _Device(
            index,
            handle,
            None if name is None else _text(name),
            None if uuid is None else _text(uuid),
        )

    @property
    def devices(self) -> int:
        return len(self._devices)

    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except self._nvml.NVMLError:
            return None

    def _newest(self, names: tuple[str, ...], *args: Any) -> Any:
        """The first of ``names`` (newest first) that this NVML has, falling back to the next
        when the driver lacks the function; None when a call fails otherwise."""
        not_found = getattr(self._nvml, "NVMLError_FunctionNotFound", ())
        for name in names:
            fn = getattr(self._nvml, name, None)
            if fn is None:
                continue
            try:
                return fn(*args)
            except not_found:
                continue
            except self._nvml.NVMLError:
                return None
        return None

    def read(self, t_ns: int, scenario: str) -> list[DeviceSample]:
        return [self._read(d, t_ns, scenario) for d in self._devices]

    def _read(self, d: _Device, t_ns: int, scenario: str) -> DeviceSample:
        nvml, h = self._nvml, d.handle
        util = self._call(nvml.nvmlDeviceGetUtilizationRates, h)
        memory = self._call(nvml.nvmlDeviceGetMemoryInfo, h)
        power_mw = self._call(nvml.nvmlDeviceGetPowerUsage, h)
        energy_mj = self._call(nvml.nvmlDeviceGetTotalEnergyConsumption, h)
        sm_mhz = self._call(nvml.nvmlDeviceGetClockInfo, h, nvml.NVML_CLOCK_SM)
        mem_mhz = self._call(nvml.nvmlDeviceGetClockInfo, h, nvml.NVML_CLOCK_MEM)
        temp = self._newest(
            ("nvmlDeviceGetTemperatureV", "nvmlDeviceGetTemperature"), h, nvml.NVML_TEMPERATURE_GPU
        )
        mask = self._newest(
            ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"),
            h,
        )
        return DeviceSample(
            t_ns=t_ns,
            source="nvml",
            device=f"gpu{d.index}",
            name=d.name,
            host=self.host,
            utilization_ratio=None if util is None else util.gpu / 100,
            memory_used_bytes=None if memory is None else int(memory.used),
            memory_total_bytes=None if memory is None else int(memory.total),
            power_w=None if power_mw is None else power_mw / 1000,
            energy_j=None if energy_mj is None else energy_mj / 1000,
            sm_clock_hz=None if sm_mhz is None else int(sm_mhz) * 1_000_000,
            memory_clock_hz=None if mem_mhz is None else int(mem_mhz) * 1_000_000,
            temperature_c=None if temp is None else float(temp),
            throttle_reasons=None if mask is None else reason_names(int(mask), self._bits),
            cpu_ratio=None,
            rss_bytes=None,
            scenario=scenario,
            uuid=d.uuid,
        )

    def close(self) -> None:
        self._call(self._nvml.nvmlShutdown)


def open_nvml(nvml: Any = None, host: str | None = None) -> NvmlSource | Unavailable:
    """Initialise NVML and list its GPUs; ``Unavailable`` with the reason where it cannot."""
    if nvml is None:
        try:
            import pynvml
        except ImportError:
            return Unavailable("NVML: nvidia-ml-py is not installed (pip install 'moeperf[gpu]')")
        nvml = pynvml
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        # LibraryNotFound (no driver installed), DriverNotLoaded, NoPermission, ...
        return Unavailable(f"NVML: {exc} ({type(exc).__name__})")
    try:
        source = NvmlSource(nvml, host)
    except nvml.NVMLError as exc:
        _shutdown(nvml)
        return Unavailable(f"NVML: cannot list the GPUs: {exc} ({type(exc).__name__})")
    if source.devices == 0:
        _shutdown(nvml)
        return Unavailable("NVML: no GPU found")
    return source


def _shutdown(nvml: Any) -> None:
    with contextlib.suppress(nvml.NVMLError):
        nvml.nvmlShutdown()
