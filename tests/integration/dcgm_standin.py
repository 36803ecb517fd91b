"""A DCGM exporter stand-in for the tests: the recorded page of two H200s, over loopback.

``rising_exporter`` answers the page with each GPU's energy counter (mJ) at its recorded
value plus ``RISE_W`` x the seconds since it started (the static page alone would give 0 J
over any window); ``counter_at`` reads a device's counter at a time from its samples, as
the figures interpolate it; ``stamp_lag_s`` is how far a reading's counter can be from its
stamp.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from aiohttp import web

from moeperf.collectors.accel_records import DeviceSample

DCGM_PAGE = (Path(__file__).parents[1] / "data/accel/dcgm_exporter_h200x2.prom").read_text()
DEVICES = ("gpu-node-7:gpu0", "gpu-node-7:gpu1")
ENERGY = re.compile(r"^(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION\{[^}]*\}) (\d+)$", re.M)
RISE_W = 400.0  # each GPU's counter rises 400 J a second (its page's power says otherwise)


def rising_exporter(served_ns: list[int] | None = None) -> Any:
    """The recorded page with each energy counter (mJ) at its recorded value plus
    RISE_W x the seconds since the exporter started, on this process's monotonic clock.
    ``served_ns``: each answer's time (monotonic ns) is appended to it."""
    started_ns = time.monotonic_ns()

    async def handler(request: web.Request) -> web.Response:
        now_ns = time.monotonic_ns()
        if served_ns is not None:
            served_ns.append(now_ns)
        added_mj = round(RISE_W * 1000 * (now_ns - started_ns) / 1e9)
        text = ENERGY.sub(lambda m: f"{m[1]} {int(m[2]) + added_mj}", DCGM_PAGE)
        return web.Response(text=text, content_type="text/plain")

    return handler


def counter_at(samples: list[DeviceSample], t_ns: int) -> float:
    """One device's counter at ``t_ns``, on the line through its readings on either side."""
    before = max((s for s in samples if s.t_ns < t_ns), key=lambda s: s.t_ns)
    after = min((s for s in samples if s.t_ns >= t_ns), key=lambda s: s.t_ns)
    assert before.energy_j is not None and after.energy_j is not None
    share = (t_ns - before.t_ns) / (after.t_ns - before.t_ns)
    return before.energy_j + share * (after.energy_j - before.energy_j)


def stamp_lag_s(samples: list[DeviceSample], served_ns: list[int], anchor_ns: int) -> float:
    """The longest a DCGM reading's counter was read after its stamp, in seconds: the
    sampler stamps, then fetches; the exporter's counter is that of its answer. One answer
    per fetch, in order (one sampler thread), each giving every device a sample; the first
    answer is the source's opening check (open_dcgm), which stores nothing."""
    stamps = sorted({s.t_ns for s in samples if s.source == "dcgm"})
    stored = served_ns[1:]
    assert len(stamps) == len(stored), (len(stamps), len(stored))
    lags_ns = [served - (anchor_ns + t) for served, t in zip(stored, stamps, strict=True)]
    assert min(lags_ns) >= 0  # never answered before it was asked
    return max(lags_ns) / 1e9
