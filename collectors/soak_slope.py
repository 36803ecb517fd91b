"""A series' linear trend over a soak's windows, with a 95% interval.

Ordinary least squares of the window values against the windows' mid times
(``scipy.stats.linregress``); the interval is slope +/- t(0.975, n - 2) x the slope's
standard error, the textbook interval for a regression slope with independent, equally
noisy residuals. Window values are means or quantiles of many samples, which makes them
closer to that than raw samples are (a process's RSS read every second is strongly
autocorrelated; its window means much less so), but slow wander between windows still
makes the interval optimistic: the verdicts ask for the whole interval to clear a
threshold, not just zero.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from moeperf.collectors.soak_records import Slope

S_PER_HOUR = 3600.0
CONFIDENCE = 0.95
MIN_WINDOWS = 3  # two points fit any line exactly: no residual, no interval


def fit_slope(mid_s: Sequence[float], values: Sequence[float | None]) -> Slope:
    """The trend of ``values`` (None or NaN: the window has no value) over ``mid_s``."""
    points = [
        (t, v) for t, v in zip(mid_s, values, strict=True) if v is not None and math.isfinite(v)
    ]
    first = float(points[0][1]) if points else None
    last = float(points[-1][1]) if points else None
    if len(points) < MIN_WINDOWS:
        return Slope(len(points), first, last)
    # scipy.stats takes a second to import: only a run that fits slopes (a soak) pays it.
    from scipy import stats

    x = np.array([t for t, _ in points], dtype=float)
    y = np.array([v for _, v in points], dtype=float)
    if np.ptp(y) == 0.0:
        # A constant series: linregress would divide 0 by 0; its slope is exactly 0.
        slope_per_s, stderr = 0.0, 0.0
    else:
        fit = stats.linregress(x, y)
        slope_per_s, stderr = float(fit.slope), float(fit.stderr)
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, len(points) - 2)) * stderr
    per_hour = slope_per_s * S_PER_HOUR
    low, high = (slope_per_s - half) * S_PER_HOUR, (slope_per_s + half) * S_PER_HOUR

    def percent(value: float) -> float | None:
        return 100.0 * value / abs(first) if first else None

    return Slope(
        windows=len(points),
        first=first,
        last=last,
        span_s=float(x[-1] - x[0]),
        per_hour=per_hour,
        low_per_hour=low,
        high_per_hour=high,
        percent_per_hour=percent(per_hour),
        percent_low_per_hour=percent(low),
        percent_high_per_hour=percent(high),
    )
