"""``[soak]``: a long serving level watched for slow degradation, validated at the edge.

A soak runs one load level (``load.levels`` with one entry) for ``load.duration_s``. Its
measured part (after ``load.warmup_s``, before ``load.cooldown_s``) is cut into windows of
``window_s``; every series gets one value per window and a slope with a 95% interval
(collectors/soak_slope.py). The thresholds decide the verdicts (collectors/soak_verdicts.py
has the rules): a verdict is found only when the slope's whole interval lies beyond its
threshold, so a threshold of 0 still asks for an interval that excludes zero.

Defaults, and why:
- ``leak_min_mib_per_hour = 32`` and ``leak_min_percent_per_hour = 2``: a server's RSS
  creeps at start (allocator arenas, caches filling) and moves by a few MiB with its load;
  a leak that matters over a day of serving is tens of MiB an hour or more;
- ``drift_min_percent_per_hour = 10``: 10% an hour is a 2.4x change over a day;
- ``drift_min_percent = 10``: and at least this much over the measured span, for runs of
  minutes, which extrapolate a busier stretch of a shared host (a few %) to hundreds of %
  an hour (seen: -4% throughput over 25 s of a CI run, -708 %/h, interval -1250 to -161);
- ``kv_min_points_per_hour = 5``: KV-cache usage in percentage points (0-100) an hour;
- ``kv_min_points = 5``: and at least this many points over the measured span, for runs of
  minutes: a usage held near full by preemptions wanders by a few points between windows,
  which a 40 s span extrapolates to hundreds of points an hour (seen on the reference
  engine: 85 to 90% over 5 windows, 487 points/h, interval 161 to 814, with every block
  freed once the load stopped);
- ``expert_drift_max = 0.1``: total variation distance of the expert-load shares between
  the first and last windows (sampling noise of a window's routed tokens is well below it
  at thousands of tokens per window);
- ``memory_interval_s = 1``: a psutil read of a process tree costs well under a millisecond.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from moeperf.suites.spec_base import NonNegative, Positive, Strict

MIN_WINDOWS = 3  # a slope's interval needs n - 2 >= 1 degrees of freedom


class SoakSpec(Strict):
    # Width of the time-series windows each slope is fitted over.
    window_s: Positive = 10.0
    # How often the target's process tree's resident memory is read (embedded targets).
    memory_interval_s: Annotated[float, Field(gt=0, le=60)] = 1.0
    # Memory leak: the target's RSS slope interval lies wholly above this, and above
    # leak_min_percent_per_hour of the first window's RSS.
    leak_min_mib_per_hour: NonNegative = 32.0
    # A memory leak also needs the RSS slope's lower end, as % of the first window's RSS
    # an hour, above this.
    leak_min_percent_per_hour: NonNegative = 2.0
    # Drift (output tokens/s falling, TTFT or TPOT p50 rising): the slope interval lies
    # wholly beyond this % of the first window an hour, and the change exceeds
    # drift_min_percent.
    drift_min_percent_per_hour: NonNegative = 10.0
    # A drift also needs the least change the slope interval allows over the measured
    # span to exceed this % (for runs of minutes).
    drift_min_percent: NonNegative = 10.0
    # KV usage rising: the KV-cache usage slope interval lies wholly above this many
    # percentage points (0-100) an hour, and the rise exceeds kv_min_points.
    kv_min_points_per_hour: NonNegative = 5.0
    # KV usage rising also needs the least rise the slope interval allows over the
    # measured span to exceed this many points (for runs of minutes).
    kv_min_points: NonNegative = 5.0
    # Expert-load drift (reported, never fails the run): the largest per-layer total
    # variation distance between the first and last windows' expert shares is above this.
    expert_drift_max: Annotated[float, Field(ge=0, le=1)] = 0.1

    def check_level(self, measured_s: float) -> list[str]:
        """Problems with windows over a measured part of ``measured_s`` seconds."""
        windows = int(measured_s / self.window_s + 1e-9)
        if windows >= MIN_WINDOWS:
            return []
        return [
            f"soak.window_s = {self.window_s:g} s gives {windows} whole window(s) in the "
            f"level's measured {measured_s:g} s (load.duration_s - warmup_s - cooldown_s); a "
            f"slope's interval needs at least {MIN_WINDOWS}: lower window_s or raise "
            "load.duration_s"
        ]
