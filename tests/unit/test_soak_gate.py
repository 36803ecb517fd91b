"""The soak's gate metrics (reports/soak_gate.py) from hand-made summaries: a baseline that
soaked against a candidate that did not is "missing from candidate" (a failure), a trend
the candidate could not judge is "inconclusive" (not judged, not a failure), whatever the
baseline found; expert-load drift, which never fails a run, is only reported; neither
soaking gives no soak metric."""

from __future__ import annotations

from collections.abc import Sequence

from moeperf.collectors.soak_records import Slope, SoakSummary, SoakThresholds, SoakWindow
from moeperf.collectors.soak_slope import fit_slope
from moeperf.collectors.soak_verdicts import drift_verdict, expert_verdict, kv_verdict, leak_verdict
from moeperf.reports.soak_gate import EXPERT_STATISTIC, STATISTIC, soak_verdicts
from moeperf.reports.verdicts import FAILING

MIB = 2**20
T = SoakThresholds(32 * MIB, 2.0, 10.0, 10.0, 5.0, 0.1, 5.0)
NAMES = ("memory leak", "throughput drift", "TTFT drift", "TPOT drift", "KV usage rising",
         "expert-load drift")  # fmt: skip


def _soak(
    n: int,
    rss: Sequence[float | None],
    kv: Sequence[float | None],
    experts: tuple[float, ...] | None,
) -> SoakSummary:
    """A soak of ``n`` 60 s windows, flat throughput and latency, the given RSS and KV
    usage per window and expert drift; its verdicts by the soak's own rules."""
    mids = [60.0 * (i + 0.5) for i in range(n)]
    flat = fit_slope(mids, [100.0] * n)
    ttft = fit_slope(mids, [0.2] * n)
    rss_slope, kv_slope = fit_slope(mids, list(rss)), fit_slope(mids, list(kv))
    windows = tuple(
        SoakWindow(i, 60.0 * i, 60.0 * (i + 1), 10, 0, 100.0, 0.2, 0.3, 0.01, rss[i], 6, kv[i])
        for i in range(n)
    )
    return SoakSummary(
        scenario="c=2",
        window_s=60.0,
        memory_interval_s=10.0,
        memory_source="process",
        windows=windows,
        throughput=flat,
        ttft_p50=ttft,
        ttft_p99=ttft,
        tpot_p50=fit_slope(mids, [0.01] * n),
        rss=rss_slope,
        kv_usage=kv_slope,
        preemptions=Slope(0, None, None),
        preemptions_total=None,
        expert_drift_by_layer=experts,
        thresholds=T,
        verdicts=(
            leak_verdict(rss_slope, T),
            drift_verdict("throughput drift", flat, "output tok/s", -1, T),
            drift_verdict("TTFT drift", ttft, "TTFT p50", +1, T),
            drift_verdict("TPOT drift", fit_slope(mids, [0.01] * n), "TPOT p50", +1, T),
            kv_verdict(kv_slope, None, T),
            expert_verdict(experts, T),
        ),
    )


def _leaking(n: int = 6) -> SoakSummary:
    # +64 MiB a window (3.75 GiB/h): a leak; KV usage level; experts steady.
    rss = [300.0 * MIB + 64 * MIB * i for i in range(n)]
    return _soak(n, rss, [0.4] * n, (0.01, 0.02))


def test_a_baseline_soak_against_a_candidate_without_one_is_missing_for_every_trend():
    baseline = _leaking()
    verdicts = soak_verdicts(None, baseline)
    assert [v.name for v in verdicts] == [f"soak {name}" for name in NAMES]
    by_name = {v.name: v for v in verdicts}
    for name in NAMES[:-1]:
        v = by_name[f"soak {name}"]
        assert v.outcome == "missing from candidate" and v.outcome in FAILING
        assert v.kind == "required"
        assert v.reason == "the baseline is a soak run; the candidate has no soak"
        assert v.metric_class == "soak" and v.candidate is None
    leak = by_name["soak memory leak"]
    assert leak.key == f"soak memory leak {STATISTIC}" and leak.unit == "B/h"
    assert leak.baseline == baseline.rss.per_hour and leak.direction == "lower"
    assert by_name["soak throughput drift"].direction == "higher"
    # Expert-load drift is a distance between two windows' shares, not a slope: its
    # statistic says so and its figure is the largest layer's.
    # A finding that never fails a run is reported, not missing: no failure.
    expert = by_name["soak expert-load drift"]
    assert expert.statistic == EXPERT_STATISTIC and expert.baseline == 0.02
    assert expert.outcome == expert.kind == "reported" and expert.outcome not in FAILING


def test_trends_the_candidate_cannot_judge_are_inconclusive_whatever_the_baseline_found():
    baseline = _leaking()
    # A target without KV usage or expert counters (the synthetic one): "not available".
    no_counters = _soak(6, [300.0 * MIB] * 6, [None] * 6, None)
    verdicts = {v.name: v for v in soak_verdicts(no_counters, baseline)}
    kv = verdicts["soak KV usage rising"]
    assert kv.outcome == "inconclusive" and not kv.judged and kv.outcome not in FAILING
    assert kv.reason == "the target reports no KV-cache usage; baseline: not found"
    assert kv.candidate is None and kv.baseline == baseline.kv_usage.per_hour
    expert = verdicts["soak expert-load drift"]
    assert expert.outcome == "reported" and expert.candidate is None
    assert expert.reason == (
        "not available: the target reports no expert counters; baseline: not found"
    )
    # The baseline's leak does not make the candidate's level memory a regression.
    leak = verdicts["soak memory leak"]
    assert leak.outcome == "no change" and leak.reason.endswith("; baseline: found")

    # Two windows: no interval, so no trend can be judged, not even the leak.
    short = _soak(2, [300.0 * MIB, 900.0 * MIB], [0.4, 0.9], (0.5,))
    verdicts = {v.name: v for v in soak_verdicts(short, baseline)}
    for name in ("memory leak", "throughput drift", "TTFT drift", "TPOT drift",
                 "KV usage rising"):  # fmt: skip
        v = verdicts[f"soak {name}"]
        assert v.outcome == "inconclusive", v
        assert v.reason.startswith("2 window(s) with a value")
        assert v.candidate is None and v.baseline is not None
    # The expert drift needs only the first and last windows: found, and reported as such
    # (it does not fail the run, so it does not fail the gate).
    expert = verdicts["soak expert-load drift"]
    assert expert.outcome == "reported" and expert.reason.startswith("found: ")
    assert expert.candidate == 0.5


def test_no_soak_on_either_side_adds_no_metric():
    assert soak_verdicts(None, None) == []
