"""A soak's verdicts, from its slopes and thresholds.

Every trend verdict asks that the whole 95% interval of the slope lies beyond its
threshold on the bad side (thresholds are >= 0 and the comparison strict), so an interval
that includes zero is never a finding: a flat, noisy series is "not found", however
large its noise. Rules:

- memory leak (fails the run): RSS slope interval entirely above
  ``leak_min_bytes_per_hour`` AND, relative to the first window, above
  ``leak_min_percent_per_hour``;
- throughput drift (fails): output tokens/s slope interval entirely below
  -``drift_min_percent_per_hour`` (% of the first window per hour), and its near end, over
  the windows' span, a fall of more than ``drift_min_percent``;
- TTFT drift, TPOT drift (fail): the p50's slope interval entirely above
  +``drift_min_percent_per_hour``, and a rise of more than ``drift_min_percent`` over the
  span. The second condition is for short runs: a run of minutes extrapolates a few
  percent (a busier stretch of the host) to hundreds of % an hour. The p99s are shown,
  not judged (a window holds few requests, and a per-window p99 of them is mostly noise);
- KV usage rising (fails): the KV-cache usage slope interval entirely above
  ``kv_min_points_per_hour`` percentage points per hour (under a steady load a target
  that frees its blocks holds a level usage), and a rise of more than ``kv_min_points``
  points over the span (usage is bounded at 100: a run of minutes extrapolates a few
  points of wander to hundreds an hour, as it does latency);
- expert-load drift (reported, does not fail the run): the largest per-layer total
  variation distance between the first and last windows' expert shares above
  ``expert_drift_max`` (routing follows the prompts' content, so a drift says as much
  about the workload's mix as about the target).
"""

from __future__ import annotations

from moeperf.collectors.soak_records import Slope, SoakThresholds, SoakVerdict, VerdictName
from moeperf.collectors.soak_slope import S_PER_HOUR


def _interval(slope: Slope, unit: str, scale: float = 1.0, digits: int = 3) -> str:
    assert slope.per_hour is not None and slope.low_per_hour is not None
    assert slope.high_per_hour is not None
    f = f"{{:.{digits}g}}"
    text = (
        f"{f.format(slope.per_hour * scale)} {unit}/h "
        f"(95% CI {f.format(slope.low_per_hour * scale)} to "
        f"{f.format(slope.high_per_hour * scale)})"
    )
    if slope.percent_per_hour is not None:
        assert slope.percent_low_per_hour is not None and slope.percent_high_per_hour is not None
        text += (
            f", {slope.percent_per_hour:+.3g} %/h of the first window "
            f"({slope.percent_low_per_hour:+.3g} to {slope.percent_high_per_hour:+.3g})"
        )
    return f"{text} over {slope.windows} windows"


def _span_change(near: float, far: float, unit: str, words: tuple[str, str]) -> str:
    """The interval as a change over the span, in words. ``near`` and ``far``: its ends
    as changes in the bad direction (positive: a degradation), ``near`` the smaller."""
    worse, better = words

    def change(value: float) -> str:
        return f"a {abs(value):.3g}{unit} {worse if value > 0 else better}"

    if near > 0:
        return f"the interval's near end is {change(near)}"
    if far > 0:
        return f"the interval includes no change ({change(near)} to {change(far)})"
    return f"the interval allows no {worse} (at least {change(far)})"


def _few(name: VerdictName, slope: Slope, fails: bool) -> SoakVerdict | None:
    if slope.windows == 0:
        return SoakVerdict(name, "not available", fails, "no window has a value")
    if slope.per_hour is None:
        return SoakVerdict(
            name, "too few windows", fails, f"{slope.windows} window(s) with a value"
        )
    return None


def leak_verdict(rss: Slope, t: SoakThresholds) -> SoakVerdict:
    name: VerdictName = "memory leak"
    if (few := _few(name, rss, True)) is not None:
        return few
    assert rss.low_per_hour is not None
    relative = rss.percent_low_per_hour
    found = (
        rss.low_per_hour > t.leak_min_bytes_per_hour
        and relative is not None
        and relative > t.leak_min_percent_per_hour
    )
    rule = (
        f"leak when the whole interval is above {t.leak_min_bytes_per_hour / 2**20:g} MiB/h "
        f"and {t.leak_min_percent_per_hour:g} %/h"
    )
    reason = f"RSS slope {_interval(rss, 'MiB', 1 / 2**20)}; {rule}"
    return SoakVerdict(name, "found" if found else "not found", True, reason)


def drift_verdict(
    name: VerdictName, slope: Slope, what: str, worse: int, t: SoakThresholds
) -> SoakVerdict:
    """``worse``: +1 when a rise is the degradation (latency), -1 when a fall is."""
    if (few := _few(name, slope, True)) is not None:
        return few
    low, high = slope.percent_low_per_hour, slope.percent_high_per_hour
    limit = t.drift_min_percent_per_hour
    if low is None or high is None:
        return SoakVerdict(name, "not available", True, f"{what}: the first window is 0")
    # The interval's end nearest zero, as a change over the windows' span (in %).
    span_h = slope.span_s / S_PER_HOUR
    least_change = low * span_h if worse > 0 else -high * span_h
    most_change = high * span_h if worse > 0 else -low * span_h
    found = (low > limit if worse > 0 else high < -limit) and least_change > t.drift_min_percent
    side = "above +" if worse > 0 else "below -"
    scale, unit = (1e3, "ms") if what != "output tok/s" else (1.0, "tok/s")
    words = ("rise", "fall") if worse > 0 else ("fall", "rise")
    change = _span_change(least_change, most_change, "%", words)
    reason = (
        f"{what} slope {_interval(slope, unit, scale)}; {change} over the {slope.span_s:g} s "
        f"span; drift when the whole interval is {side}{limit:g} %/h and that change is over "
        f"{t.drift_min_percent:g}%"
    )
    return SoakVerdict(name, "found" if found else "not found", True, reason)


def kv_verdict(kv: Slope, preemptions_total: float | None, t: SoakThresholds) -> SoakVerdict:
    name: VerdictName = "KV usage rising"
    if kv.windows == 0:
        return SoakVerdict(name, "not available", True, "the target reports no KV-cache usage")
    if (few := _few(name, kv, True)) is not None:
        return few
    assert kv.low_per_hour is not None and kv.per_hour is not None
    assert kv.high_per_hour is not None
    span_h = kv.span_s / S_PER_HOUR
    least_points, most_points = kv.low_per_hour * 100 * span_h, kv.high_per_hour * 100 * span_h
    found = kv.low_per_hour * 100 > t.kv_min_points_per_hour and least_points > t.kv_min_points
    preempted = "not reported" if preemptions_total is None else f"{preemptions_total:g}"
    change = _span_change(least_points, most_points, " points", ("rise", "fall"))
    reason = (
        f"KV-cache usage slope {kv.per_hour * 100:.3g} points/h (95% CI "
        f"{kv.low_per_hour * 100:.3g} to {kv.high_per_hour * 100:.3g}) over {kv.windows} "
        f"windows; {change} over the {kv.span_s:g} s span; rising when the whole interval is "
        f"above {t.kv_min_points_per_hour:g} points/h and that rise is over "
        f"{t.kv_min_points:g} points; preemptions {preempted}"
    )
    return SoakVerdict(name, "found" if found else "not found", True, reason)


def expert_verdict(by_layer: tuple[float, ...] | None, t: SoakThresholds) -> SoakVerdict:
    name: VerdictName = "expert-load drift"
    if by_layer is None or not by_layer:
        return SoakVerdict(name, "not available", False, "the target reports no expert counters")
    worst = max(by_layer)
    layer = by_layer.index(worst)
    found = worst > t.expert_drift_max
    reason = (
        f"largest change of the expert-load shares, first to last window: total variation "
        f"{worst:.3f} (layer {layer}); drift above {t.expert_drift_max:g}"
    )
    return SoakVerdict(name, "found" if found else "not found", False, reason)
