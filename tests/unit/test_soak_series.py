"""A soak's windows read from the target's stored scrapes (KV usage, preemptions, expert
shares) and its spec's refusals, from hand-built inputs whose answers are known."""

from __future__ import annotations

import pytest

from moeperf.collectors.export import metric_names as mn
from moeperf.collectors.soak_target_series import TargetSeries
from moeperf.collectors.sources import target_dialects as td
from moeperf.specs import load_spec
from moeperf.suites.errors import SpecError
from moeperf.suites.serving.spec import ServingSpec
from moeperf.targets.synthetic.config import SyntheticConfig, SyntheticConfigError
from moeperf.targets.synthetic.plan import plan_request

S = 1_000_000_000


def _scrape(t_s: float, kv: float, preempted: float, experts: dict[tuple[str, str], float]):
    series = [
        {"name": mn.TARGET_KV_USAGE.name, "labels": {}, "kind": "gauge", "value": kv},
        {"name": td.TARGET_PREEMPTIONS.name, "labels": {}, "kind": "counter",
         "value": preempted, "run_value": preempted},
    ] + [
        {"name": mn.TARGET_EXPERT_TOKENS.name, "labels": {"layer": layer, "expert": expert},
         "kind": "counter", "value": n, "run_value": n}
        for (layer, expert), n in experts.items()
    ]  # fmt: skip
    return {"t_ns": int(t_s * S), "available": True, "dialect": "reference", "series": series}


def test_gauges_counters_and_expert_shares_over_windows():
    scrapes = [
        _scrape(0, 0.1, 0, {("0", "0"): 0, ("0", "1"): 0}),
        _scrape(5, 0.2, 2, {("0", "0"): 50, ("0", "1"): 50}),
        _scrape(10, 0.3, 3, {("0", "0"): 100, ("0", "1"): 100}),
        _scrape(15, 0.5, 7, {("0", "0"): 190, ("0", "1"): 110}),
        _scrape(20, 0.5, 7, {("0", "0"): 280, ("0", "1"): 120}),
    ]
    target = TargetSeries(scrapes)
    # Gauges: the scrapes inside [lo, hi); counters: run_value at hi minus at lo.
    assert target.gauge_mean(mn.TARGET_KV_USAGE.name, 0, 10 * S) == pytest.approx(0.15)
    assert target.increase(td.TARGET_PREEMPTIONS.name, 0, 10 * S) == 3
    assert target.increase(td.TARGET_PREEMPTIONS.name, 10 * S, 20 * S) == 4
    # First window 50/50, last 180/20: the shares moved by 0.4 (total variation).
    drift = target.expert_drift((0, 10 * S), (10 * S, 20 * S))
    assert drift == pytest.approx((0.4,))
    assert TargetSeries([]).expert_drift((0, S), (S, 2 * S)) is None
    assert TargetSeries([]).gauge_mean(mn.TARGET_KV_USAGE.name, 0, S) is None


def test_the_soak_spec_refuses_too_few_windows_and_a_second_level():
    with pytest.raises(SpecError, match="at least 3"):
        load_spec("soak", ["soak.window_s=40"])
    with pytest.raises(SpecError, match=r"one load.levels entry"):
        load_spec("soak", ["load.levels=[1, 2]"])
    full = load_spec("soak-full").spec
    assert isinstance(full, ServingSpec) and full.soak is not None


def test_the_planted_slowdown_and_leak_switches_are_validated_and_off_by_default():
    config = SyntheticConfig()
    assert config.leak_bytes_per_request == 0 and config.slowdown_per_request_ratio == 0
    with pytest.raises(SyntheticConfigError, match="leak_bytes_per_request"):
        SyntheticConfig(leak_bytes_per_request=-1)
    with pytest.raises(SyntheticConfigError, match="leak_bytes_per_request"):
        SyntheticConfig(leak_bytes_per_request=64 * 2**20)
    with pytest.raises(SyntheticConfigError, match="slowdown_per_request_ratio"):
        SyntheticConfig(slowdown_per_request_ratio=float("nan"))
    slow = SyntheticConfig(ttft_s=0.05, itl_s=0.01, slowdown_per_request_ratio=0.01)
    first, hundred_first = plan_request(slow, 1, 4), plan_request(slow, 101, 4)
    assert first.due_ns[0] == 50_000_000
    assert hundred_first.due_ns[0] == 100_000_000  # x (1 + 0.01 x 100)
    assert hundred_first.due_ns[-1] - hundred_first.due_ns[0] == 3 * 20_000_000
