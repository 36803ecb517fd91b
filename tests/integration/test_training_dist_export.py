"""A training-dist run pushed to a real Pushgateway: the job's steps (every rank's record of a
step merged), not the ranks', with the restart the SIGKILL drill causes; each figure checked
against the run's own step records (suites/training/dist_export.py)."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from moeperf.collectors.store import RunStore
from moeperf.suites.run_options import RunOptions
from moeperf.suites.training.dist_runner import run_training_dist
from moeperf.suites.training.dist_spec import DistTrainingSpec

pytestmark = pytest.mark.slow

EP2 = "ep2/keep-all/calm"
PP2 = "pp2/keep-all/calm"


def spec() -> DistTrainingSpec:
    return DistTrainingSpec.model_validate(
        {
            "name": "dist-export",
            "peak_flops_per_s": 1e11,  # given: no matmul benchmark before the jobs
            "trainer": {
                "init_from": "none",
                "mtp": False,
                "seq_len": 32,
                "micro_batch_size": 2,
                "microbatches": 2,
                "steps": 6,
                "checkpoint_every": 2,
                "threads": 1,
                "model": {"hidden_size": 32, "num_heads": 2, "num_kv_heads": 1},
            },
            "matrix": {"layouts": [{"name": "ep2", "ep": 2}, {"name": "pp2", "pp": 2}]},
            "faults": {"kill_rank": 1, "after_step": 2, "layouts": ["ep2"]},
            "telemetry": {"sources": ["process"], "period_s": 0.1},
        }
    )


def pushed(text: str, name: str, policy: str) -> float:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels.get("policy") == policy:
                return sample.value
    raise AssertionError(f"{name}{{policy={policy!r}}} not pushed")


def test_the_jobs_steps_reach_the_pushgateway(tmp_path, pushgateway):
    store = RunStore(tmp_path / "runs")
    training = spec()
    run_id = run_training_dist(
        training,
        training.model_dump(mode="json"),
        store,
        RunOptions(pushgateway_url=pushgateway.url),
    )
    reader = store.open(run_id)
    assert reader.manifest.status == "complete"
    steps = reader.steps()
    text = pushgateway.metrics_text()
    for scenario, world, last_stage in ((EP2, 2, 0), (PP2, 2, 1)):
        mine = steps[steps["scenario"] == scenario]
        # Every execution every rank finished (a replay again: work done), as the
        # exporter merged them; one a rank did not finish (the killed one) is not a step.
        executions = [g for _, g in mine.groupby(["attempt", "step"]) if len(g) == world]
        tokens = sum(int(g[g["stage"] == last_stage]["tokens"].sum()) for g in executions)
        assert tokens > 0
        assert pushed(text, "moeperf_train_tokens_total", scenario) == tokens
        assert pushed(text, "moeperf_train_step_seconds_count", scenario) == len(executions)
        job_s = sum((g["end_ns"].max() - g["start_ns"].min()) / 1e9 for g in executions)
        assert pushed(text, "moeperf_train_step_seconds_sum", scenario) == pytest.approx(job_s)
        assert 0 < pushed(text, "moeperf_train_mfu_ratio", scenario) < 1
        highest = int(mine["peak_memory_bytes"].max())
        assert 0 < pushed(text, "moeperf_train_peak_memory_bytes", scenario) <= highest
    # The drill killed rank 1 of the ep2 job once: one restart (both ranks restored).
    assert sorted(steps[steps["scenario"] == EP2]["attempt"].unique().tolist()) == [0, 1]
    assert pushed(text, "moeperf_train_restarts_total", EP2) == 1
    assert "moeperf_target_process_resident_memory_bytes" in text  # the sampler's, live
