"""A DCGM exporter's Prometheus page, read into one ``DeviceSample`` per GPU.

Pure: text in, samples out; the HTTP side is ``collectors.sources.dcgm_source``. The page is parsed
by ``collectors.sources.target_metrics.parse_exposition`` (prometheus_client's parser).

dcgm-exporter (github.com/NVIDIA/dcgm-exporter, etc/default-counters.csv and
internal/pkg/rendermetrics/render_metrics.go) labels every GPU series
``gpu="<index>", UUID="<uuid>", pci_bus_id, device="nvidia<index>", modelName`` and, where
set, ``hostname`` (and ``GPU_I_PROFILE``/``GPU_I_ID`` for a MIG instance). The UUID label is
``uuid`` under some flags and older releases used ``Hostname``: both spellings are read.

Series read (the exporter's unit -> ours), all in its default counters:
- ``DCGM_FI_DEV_GPU_UTIL`` (%) / 100 -> ``utilization_ratio``
- ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` (ratio) -> ``engine_active_ratio`` (profiling metrics:
  datacenter GPUs, Volta and newer)
- ``DCGM_FI_DEV_FB_USED`` (MiB) -> ``memory_used_bytes``; total = FB_USED + FB_FREE
  + FB_RESERVED (reserved where exported: DCGM 3 and newer keep it out of used)
- ``DCGM_FI_DEV_POWER_USAGE`` (W) -> ``power_w``
- ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` (mJ since boot) / 1000 -> ``energy_j``
- ``DCGM_FI_DEV_SM_CLOCK`` / ``DCGM_FI_DEV_MEM_CLOCK`` (MHz) x 1e6 -> ``*_clock_hz``
- ``DCGM_FI_DEV_GPU_TEMP`` (C) -> ``temperature_c``
Throttle reasons are not among the default counters: ``throttle_reasons`` is None.

DCGM writes a "blank" sentinel where a field is not supported or not yet read (the README's
own example shows ``DCGM_FI_DEV_MEMORY_TEMP ... 9223372036854775794``): such values are
None here. The values are the exporter's latest readings (it collects every 30 s unless
started with ``-c <ms>``): the sample's ``t_ns`` is when we scraped, not when DCGM read.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from prometheus_client.metrics_core import Metric as Family

from moeperf.collectors.accel_records import DeviceSample

_MIB = 1 << 20
# dcgm_structs.h: DCGM_INT32_BLANK = 0x7ffffff0, DCGM_FP64_BLANK = 140737488355328.0; values
# at or above a blank mark "blank, not found, not supported, not permissioned". The energy
# counter (mJ, int64) can pass 2^31 legitimately, so only the FP64 blank applies to it.
_INT32_BLANK = 0x7FFFFFF0
_FP64_BLANK = 140737488355328.0
_ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
READ_SERIES = frozenset(
    {
        "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED", "DCGM_FI_DEV_POWER_USAGE", _ENERGY,
        "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_GPU_TEMP",
    }
)  # fmt: skip


@dataclass(slots=True)
class _Gpu:
    order: tuple[str, int, str]  # host, GPU index as a number, device id
    device: str
    host: str
    name: str | None
    uuid: str | None
    values: dict[str, float] = field(default_factory=dict)  # this module's own, by series


def _blank(series: str, value: float) -> bool:
    return value != value or value >= (_FP64_BLANK if series == _ENERGY else _INT32_BLANK)


def _label(labels: dict[str, str], *names: str) -> str | None:
    for name in names:
        if labels.get(name):
            return labels[name]
    return None


def dcgm_samples(
    families: Iterable[Family], t_ns: int, scenario: str, default_host: str
) -> list[DeviceSample]:
    """One sample per GPU (or MIG instance) found in the DCGM series, in index order.

    ``default_host`` names the host where the page has no hostname label (the URL's host).
    """
    gpus: dict[str, _Gpu] = {}  # by device id
    for family in families:
        if family.name not in READ_SERIES:
            continue
        for s in family.samples:
            index = s.labels.get("gpu")
            if index is None or _blank(family.name, s.value):
                continue
            host = _label(s.labels, "hostname", "Hostname") or default_host
            instance = s.labels.get("GPU_I_ID", "")
            device = f"{host}:gpu{index}" + (f"/mig{instance}" if instance else "")
            gpu = gpus.get(device)
            if gpu is None:
                name, uuid = _label(s.labels, "modelName"), _label(s.labels, "UUID", "uuid")
                order = (host, int(index) if index.isdigit() else -1, device)
                gpu = gpus[device] = _Gpu(order, device, host, name, uuid)
            gpu.values[family.name] = s.value
    return [_sample(g, t_ns, scenario) for g in sorted(gpus.values(), key=lambda g: g.order)]


def _sample(g: _Gpu, t_ns: int, scenario: str) -> DeviceSample:
    v = g.values.get
    util, used, free = v("DCGM_FI_DEV_GPU_UTIL"), v("DCGM_FI_DEV_FB_USED"), v("DCGM_FI_DEV_FB_FREE")
    energy_mj, sm, mem = v(_ENERGY), v("DCGM_FI_DEV_SM_CLOCK"), v("DCGM_FI_DEV_MEM_CLOCK")
    temp = v("DCGM_FI_DEV_GPU_TEMP")
    total = None
    if used is not None and free is not None:
        total = round((used + free + v("DCGM_FI_DEV_FB_RESERVED", 0.0)) * _MIB)
    return DeviceSample(
        t_ns=t_ns,
        source="dcgm",
        device=g.device,
        name=g.name,
        host=g.host,
        utilization_ratio=None if util is None else util / 100,
        memory_used_bytes=None if used is None else round(used * _MIB),
        memory_total_bytes=total,
        power_w=v("DCGM_FI_DEV_POWER_USAGE"),
        energy_j=None if energy_mj is None else energy_mj / 1000,
        sm_clock_hz=None if sm is None else round(sm * 1e6),
        memory_clock_hz=None if mem is None else round(mem * 1e6),
        temperature_c=temp,
        throttle_reasons=None,
        cpu_ratio=None,
        rss_bytes=None,
        scenario=scenario,
        uuid=g.uuid,
        engine_active_ratio=v("DCGM_FI_PROF_GR_ENGINE_ACTIVE"),
    )
