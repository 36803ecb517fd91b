"""``links_from``: the links a training-dist run measured replace a simulated cluster's
(scale-up from the all-to-all, scale-out from the pipeline ping-pong, at efficiency 1), and
a run that is not a training-dist run, or measured neither link, is a spec error."""

from __future__ import annotations

import json
import re

import pytest

from moeperf.collectors.dist_training_summary import DistTrainingSummary, LinkCalibration
from moeperf.collectors.summary_json import summary_to_json
from moeperf.collectors.training_summary import PeakFlopsSummary
from moeperf.specs import load_spec
from moeperf.suites.errors import SpecError

JOB = """
suite = "simulation"
name = "t"
[sim]
iterations = 2
[[job]]
name = "small"
model = "moe-188b"
cluster = "h100"
devices = 64
pipeline = 8
expert = 8
global_batch = 64
"""


def write(tmp_path, extra: str = "") -> str:
    path = tmp_path / "sim.toml"
    path.write_text(JOB + extra)
    return str(path)


def dist_summary(a2a: float | None, pipeline: float | None) -> DistTrainingSummary:
    link = LinkCalibration(
        all_to_all_bytes_per_s=a2a, all_to_all_bytes=1000, pipeline_bytes_per_s=pipeline,
        pipeline_message_bytes=65536 if pipeline else None, all_reduce_bytes_per_s=2e8,
        all_reduce_bytes=4000,
    )  # fmt: skip
    return DistTrainingSummary(scenarios={}, peak_flops=PeakFlopsSummary(1e11, "measured", None),
                               link=link)  # fmt: skip


def run_dir(tmp_path, summary) -> str:
    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text(json.dumps(summary_to_json(summary)))
    return str(run)


def test_measured_links_replace_the_clusters(tmp_path):
    source = run_dir(tmp_path, dist_summary(a2a=31e6, pipeline=970e6))
    spec = load_spec(write(tmp_path, extra=f'links_from = "{source}"\n')).simulation
    cluster = spec.job[0].config().cluster
    assert cluster.scale_up_bytes_per_s == 31e6
    assert cluster.scale_out_bytes_per_s == 970e6
    assert cluster.comm_efficiency == 1.0
    assert (
        cluster.peak_flops_per_s
        == load_spec(write(tmp_path)).simulation.job[0].config().cluster.peak_flops_per_s
    )  # only the links change


def test_a_given_efficiency_still_applies(tmp_path):
    source = run_dir(tmp_path, dist_summary(a2a=31e6, pipeline=970e6))
    extra = f'links_from = "{source}"\ncomm_efficiency = 0.5\n'
    cluster = load_spec(write(tmp_path, extra=extra)).simulation.job[0].config().cluster
    assert cluster.comm_efficiency == 0.5


@pytest.mark.parametrize(
    ("a2a", "pipeline", "message"),
    [(None, 9e8, "no all-to-all (an ep layout)"),
     (3e7, None, "no pipeline send/recv (a pp layout)")],
)  # fmt: skip
def test_a_run_without_the_link_is_refused(tmp_path, a2a, pipeline, message):
    source = run_dir(tmp_path, dist_summary(a2a, pipeline))
    with pytest.raises(SpecError, match=re.escape(message)):
        load_spec(write(tmp_path, extra=f'links_from = "{source}"\n'))


def test_a_missing_run_is_refused(tmp_path):
    with pytest.raises(SpecError, match="links_from: cannot read"):
        load_spec(write(tmp_path, extra=f'links_from = "{tmp_path / "nowhere"}"\n'))
