"""Over-saturation on a target of known capacity (collectors/saturation.py): the synthetic
target answering at most 4 streams at once, each request 0.24 s (50 ms to the first token,
then 19 more 10 ms apart), so about 16.7 requests/s. Poisson arrivals at half of that and
at one and a half times it, through the CLI as a user runs them, with
load.stop_over_saturated: the level above the capacity is stopped early, the one below
runs its whole length."""

from __future__ import annotations

import pytest

from moeperf.cli import main
from moeperf.collectors.serving_records import ServingSummary
from moeperf.collectors.store import RunStore

CAPACITY_PER_S = 4 / (0.05 + 19 * 0.01)


@pytest.mark.timing
@pytest.mark.slow
def test_a_level_above_the_capacity_is_over_saturated_and_one_below_is_not(tmp_path, capsys):
    runs = tmp_path / "runs"
    below, above = 0.5 * CAPACITY_PER_S, 1.5 * CAPACITY_PER_S
    sets = [
        "target.synthetic.max_concurrent_streams=4", "target.synthetic.ttft_s=0.05",
        "target.synthetic.itl_s=0.01", "target.synthetic.jitter='none'",
        "target.synthetic.jitter_scale=0", "workload.output_tokens.mean=20",
        "workload.output_tokens.spread=0", "load.mode='poisson'",
        f"load.levels=[{below:.2f}, {above:.2f}]", "load.duration_s=8",
        "load.warmup_s=0.5", "load.cooldown_s=0.2", "load.stop_over_saturated=true",
    ]  # fmt: skip
    code = main(["--runs-dir", str(runs), "run", "synthetic",
                 *[item for s in sets for item in ("--set", s)]])  # fmt: skip
    reader = RunStore(runs).open("latest")
    summary = reader.summary()
    assert isinstance(summary, ServingSummary)
    calm, flooded = summary.scenarios.values()
    assert calm.saturation is not None and flooded.saturation is not None
    assert not calm.saturation.over_saturated, calm.saturation
    assert calm.saturation.completions_per_s == pytest.approx(below, rel=0.25)
    assert flooded.saturation.over_saturated, flooded.saturation
    # It ends no more than its capacity, and its queue grows by the rest.
    assert flooded.saturation.completions_per_s < 1.1 * CAPACITY_PER_S
    assert flooded.saturation.in_flight.per_s > 0.25 * CAPACITY_PER_S
    # The flooded level was stopped once it showed (the watch's first check comes 3 s into
    # the measured window, the stop at the fourth over-saturated check in a row, 1.5 s
    # later: at about 5 s), the calm one ran its 8 s.
    calm_name, flooded_name = summary.scenarios
    (stop,) = [n for n in reader.manifest.notes if "(load.stop_over_saturated)" in n]
    assert stop.startswith(f"{flooded_name} stopped after ")
    assert stop.endswith("its requests still in flight were cancelled")
    frame = reader.requests()
    span_s = {
        name: (level["done_ns"].max() - level["intended_send_ns"].min()) / 1e9
        for name, level in frame.groupby("scenario")
    }
    assert span_s[calm_name] >= 7.9  # every arrival of its 8 s, then their ends
    assert span_s[flooded_name] < 7.0
    assert flooded.cancelled > 0 and calm.cancelled == 0  # the flooded one's queue, cancelled
    printed = capsys.readouterr().out
    assert "over-saturated, its latencies measure a growing queue" in printed
    assert code == 0, reader.manifest.status_reason  # the stop's cancellations fail nothing
