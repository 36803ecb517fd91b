"""A level never repeats a prompt silently, against the synthetic target over loopback: a
level bounded by count gets a pool as large as its count (none repeats); one bounded by
time counts the requests that sent a prompt of its own again, and the run says so (a
no-reuse control level most of all).

Which prompt a request sent is told by its length: the prompts' lengths are drawn from a
wide range (a seed whose pools have no two prompts of one length), and the server's own
count of each request's prompt tokens is what the checks read.
"""

from __future__ import annotations

from typing import Any

import pytest

from moeperf.cli import main
from moeperf.collectors.serving_records import ServingSummary
from moeperf.collectors.store import RunReader, RunStore
from moeperf.suites.serving.runner import run_serving
from moeperf.suites.serving.spec import ServingSpec

pytestmark = pytest.mark.slow

WORKLOAD: dict[str, Any] = {
    "input_tokens": {"dist": "uniform", "mean": 2000, "spread": 1990},
    "output_tokens": {"mean": 4},
    "seed": 3,
}
TARGET = {"kind": "synthetic", "synthetic": {"ttft_s": 0.01, "itl_s": 0.002, "jitter": "none"}}
HARNESS = {"max_loop_lag_p99_s": 1.0, "max_cpu_fraction": 1.0}


def _summary(reader: RunReader) -> ServingSummary:
    summary = reader.summary()
    assert isinstance(summary, ServingSummary)
    return summary


@pytest.mark.timeout(120)
def test_a_count_bound_level_gets_a_prompt_for_every_request(tmp_path):
    # 20 requests a level from workload.num_prompts = 8: before, 12 of them were sent again.
    spec = ServingSpec.model_validate(
        {
            "name": "count-bound",
            "target": TARGET,
            "harness": HARNESS,
            "workload": {**WORKLOAD, "num_prompts": 8},
            "load": {"levels": [1, 4], "max_requests": 20, "warmup_s": 0.0, "workers": 2},
        }
    )
    store = RunStore(tmp_path / "runs")
    reader = store.open(run_serving(spec, spec.model_dump(mode="json"), store))
    requests = reader.requests()
    per_level = requests.groupby("scenario")["prompt_tokens"]
    assert per_level.size().to_dict() == {"c=1": 20, "c=4": 20}
    # Every request of a level sent a prompt of its own length: no prompt went twice.
    assert per_level.nunique().to_dict() == {"c=1": 20, "c=4": 20}
    assert set(requests[requests["scenario"] == "c=4"]["worker"]) == {0, 1}
    summary = _summary(reader)
    assert {n: e.repeated_prompts_total for n, e in summary.scenarios.items()} == {
        "c=1": 0,
        "c=4": 0,
    }
    notes = reader.manifest.notes
    assert any("workload.num_prompts = 8 raised to as many as 20 a pool" in n for n in notes)
    assert not any("repeated" in note for note in notes)


SPEC_BY_TIME = """
suite = "serving"
name = "time-bound-repeats"
description = "prefix reuse bounded by time from a pool of 4"

[target]
kind = "synthetic"
api = "chat"

[target.synthetic]
ttft_s = 0.01
itl_s = 0.002
jitter = "none"

[harness]
max_loop_lag_p99_s = 1.0
max_cpu_fraction = 1.0

[workload]
kind = "random"
num_prompts = 4
seed = 3

[workload.prefix]
count = 2
tokens = 16

[workload.input_tokens]
dist = "uniform"
mean = 2000
spread = 1990

[workload.output_tokens]
dist = "fixed"
mean = 4

[load]
levels = [2]
duration_s = 1.5
warmup_s = 0.0
cooldown_s = 0.0
workers = 2
"""


@pytest.mark.timeout(120)
def test_a_time_bound_level_counts_its_repeats_and_the_control_says_so(tmp_path, capsys):
    spec = tmp_path / "repeats.toml"
    spec.write_text(SPEC_BY_TIME)
    code = main(["--runs-dir", str(tmp_path / "runs"), "run", str(spec)])
    printed = capsys.readouterr().out
    assert code == 0, printed[-3000:]
    reader = RunStore(tmp_path / "runs").open("latest")
    summary = _summary(reader)
    requests = reader.requests()
    notes = " ".join(reader.manifest.notes)
    assert set(summary.scenarios) == {"c=2", "c=2 unique"}
    for name, entry in summary.scenarios.items():
        level = requests[requests["scenario"] == name]
        # Each of the pool's 4 prompts went out (a length each), the rest were repeats.
        assert level["prompt_tokens"].nunique() == 4
        repeated = len(level) - 4
        assert repeated > 0
        assert entry.repeated_prompts_total == repeated
        assert sum(worker.sent for worker in entry.harness) == len(level)
        said = f"{name} repeated {repeated} of its {len(level)} prompts"
        assert said in notes
    control = summary.scenarios["c=2 unique"]
    assert (
        f"Control level c=2 unique repeated {control.repeated_prompts_total} of its "
        f"{len(requests[requests['scenario'] == 'c=2 unique'])} prompts (sent again within "
        "the level; its pool held 4 distinct prompts): its hit rate is not a clean control; "
        "raise workload.num_prompts to at least"
    ) in notes
    assert "note: Control level c=2 unique repeated" in printed
