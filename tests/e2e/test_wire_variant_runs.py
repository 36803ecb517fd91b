"""``moeperf run`` end to end against each wire variant of the embedded targets.

Each run is a real ``moeperf run`` subprocess that starts the target with its switches
(``--set target.synthetic.*`` / ``[target.reference]``), drives it, and stores records
and a summary; the tests read those back. On the synthetic target the harness's error
against the ground truth is in the summary, so a variant that fooled the harness (a
role chunk taken for the first token, chunk counts taken from end-of-stream usage)
shows up there as well as in the records.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from moeperf.collectors.serving_records import ScenarioSummary, ServingSummary
from moeperf.collectors.store import RunStore

REPO_ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PYTHONIOENCODING": "utf-8"}
OUTPUT_TOKENS = 16
TTFT_S = 0.05
# A short chat level without jitter, fixed output lengths: every request is comparable.
SHORT_RUN = [
    "load.levels=[2]", "load.duration_s=2", "load.warmup_s=0.5", "load.cooldown_s=0.2",
    'target.synthetic.jitter="none"', "target.synthetic.jitter_scale=0",
    f"target.synthetic.ttft_s={TTFT_S}",
    "workload.num_prompts=16", 'workload.input_tokens={dist="fixed", mean=32}',
    f'workload.output_tokens={{dist="fixed", mean={OUTPUT_TOKENS}}}',
    # The wire, not the client's validity, is the subject (the harness's error is still
    # compared with the default variant's): on 2 busy cores a worker's loop lag p99
    # passed 2 ms and the runs were client-bound.
    "harness.max_loop_lag_p99_s=1.0", "harness.max_cpu_fraction=1.0",
]  # fmt: skip
# What the harness sends that a strict server refuses, turned off.
OPENAI_FIELDS_ONLY = ["target.ignore_eos=false", "target.continuous_usage=false"]


@dataclass(frozen=True)
class Run:
    result: subprocess.CompletedProcess
    summary: ServingSummary
    requests: pd.DataFrame

    @property
    def level(self) -> ScenarioSummary:
        (scenario,) = self.summary.scenarios.values()
        return scenario

    @property
    def measured(self) -> pd.DataFrame:
        return self.requests[self.requests["phase"] == "measure"]


def moeperf_run(runs: Path, spec: str, *overrides: str, timeout: float = 120) -> Run:
    sets = [arg for override in overrides for arg in ("--set", override)]
    result = subprocess.run(
        [sys.executable, "-m", "moeperf.cli", "--runs-dir", str(runs), "run", spec, *sets],
        cwd=REPO_ROOT, env=ENV, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    reader = RunStore(runs).open("latest")
    summary = reader.summary()
    assert isinstance(summary, ServingSummary), result.stdout[-2000:] + result.stderr[-2000:]
    return Run(result, summary, reader.requests())


def synthetic_run(tmp_path: Path, *switches: str) -> Run:
    return moeperf_run(tmp_path / "runs", "synthetic", *SHORT_RUN, *switches)


def assert_complete_without_errors(run: Run) -> None:
    assert run.result.returncode == 0, run.result.stdout[-3000:] + run.result.stderr[-3000:]
    assert run.level.ok > 0 and run.level.errors == 0
    assert (run.requests["status"] == "ok").all()


def assert_harness_error_as_small_as_by_default(run: Run, default: Run) -> None:
    """Every ok request compared chunk by chunk with the ground truth; TTFT and ITL errors
    within a millisecond of the default variant's (a role chunk taken as the first token
    would be ~TTFT_S early, a wrong chunk count would leave requests unmatched)."""
    errors, baseline = run.level.harness_error_s, default.level.harness_error_s
    assert errors is not None and baseline is not None
    assert errors.matched_requests == run.level.ok and errors.unmatched_requests == 0
    for kind in ("ttft", "itl"):
        p50 = getattr(errors, kind).value_at(0.5)
        base_p50 = getattr(baseline, kind).value_at(0.5)
        assert p50 is not None and base_p50 is not None
        assert abs(p50) <= abs(base_p50) + 0.001, (kind, p50, base_p50)
    ttft_p50 = errors.ttft.value_at(0.5)
    assert ttft_p50 is not None and ttft_p50 >= 0  # a chunk is read after it was written


def assert_ttft_is_the_first_token(run: Run) -> None:
    # No jitter: the first token is written TTFT_S after the server got the request.
    ttft_s = (run.measured["first_token_ns"] - run.measured["send_ns"]) / 1e9
    assert (ttft_s >= TTFT_S).all(), ttft_s.min()


@pytest.fixture(scope="module")
def default_run(tmp_path_factory) -> Run:
    run = synthetic_run(tmp_path_factory.mktemp("default"))
    assert_complete_without_errors(run)
    return run


@pytest.mark.timing
@pytest.mark.slow
def test_without_done_every_stream_ends_at_its_finish_reason(tmp_path, default_run):
    run = synthetic_run(tmp_path, "target.synthetic.send_done=false")
    assert_complete_without_errors(run)
    assert set(run.requests["stream_end"]) == {"finish_reason"}
    assert set(default_run.requests["stream_end"]) == {"done"}
    assert_harness_error_as_small_as_by_default(run, default_run)


@pytest.mark.timing
@pytest.mark.slow
def test_usage_at_the_end_only_gives_the_count_but_not_the_chunks(tmp_path, default_run):
    run = synthetic_run(tmp_path, 'target.synthetic.usage="end_only"')
    assert_complete_without_errors(run)
    measured = run.measured
    assert (measured["output_tokens"] == OUTPUT_TOKENS).all()
    # Per-chunk counts are not the usage's: they are the tokenizer's (the server's here).
    assert not (measured["chunk_tokens_source"] == "usage_stats").any()
    assert set(measured["chunk_tokens_source"]) == {"server_tokenize"}
    assert (measured["chunk_tokens"].map(sum) == OUTPUT_TOKENS).all()
    assert set(default_run.measured["chunk_tokens_source"]) == {"usage_stats"}
    assert_harness_error_as_small_as_by_default(run, default_run)


@pytest.mark.timing
@pytest.mark.slow
def test_a_role_chunk_is_never_the_first_token(tmp_path, default_run):
    # The default variant sends the role chunk at once (as vLLM does), long before TTFT_S.
    def first_chunk_tokens(run: Run) -> pd.Series:
        return run.measured["chunk_tokens"].map(lambda tokens: tokens[0])

    assert (first_chunk_tokens(default_run) == 0).all()
    assert_ttft_is_the_first_token(default_run)
    run = synthetic_run(tmp_path, "target.synthetic.role_chunk=false")
    assert_complete_without_errors(run)
    assert (first_chunk_tokens(run) > 0).all()  # no role chunk: the first one is a token
    assert_ttft_is_the_first_token(run)
    assert_harness_error_as_small_as_by_default(run, default_run)


@pytest.mark.timing
@pytest.mark.slow
def test_without_usage_the_tokens_come_from_the_tokenizer(tmp_path, default_run):
    run = synthetic_run(tmp_path, 'target.synthetic.usage="never"')
    assert_complete_without_errors(run)
    measured = run.measured
    assert measured["output_tokens"].isna().all()  # the server said nothing of them
    assert set(measured["chunk_tokens_source"]) == {"server_tokenize"}
    assert (measured["client_output_tokens"] == OUTPUT_TOKENS).all()
    assert_harness_error_as_small_as_by_default(run, default_run)


@pytest.mark.slow
def test_a_strict_target_refuses_the_default_spec_naming_the_field_and_switch(tmp_path):
    # warm-up 0 and a request budget: the refusals are instant, and all measured.
    run = synthetic_run(
        tmp_path, "target.synthetic.reject_unknown_fields=true", "load.warmup_s=0",
        "load.max_requests=20",
    )  # fmt: skip
    assert run.result.returncode == 1, run.result.stdout[-3000:] + run.result.stderr[-3000:]
    assert run.level.status == "failed" and run.level.ok == 0
    requests = run.requests
    assert len(requests) > 0 and (requests["status"] == "error").all()
    assert set(requests["error_type"]) == {"http_4xx"} and set(requests["http_status"]) == {422}
    for message in requests["error_message"]:
        assert message.startswith(
            "the target rejected 'ignore_eos' (HTTP 422); set target.ignore_eos = false; "
        ), message
        assert "continuous_usage_stats" in message  # the 422's detail names both


@pytest.mark.timing
@pytest.mark.slow
def test_a_strict_target_serves_a_spec_that_sends_openai_fields_only(tmp_path, default_run):
    run = synthetic_run(
        tmp_path, "target.synthetic.reject_unknown_fields=true", *OPENAI_FIELDS_ONLY
    )
    assert_complete_without_errors(run)
    assert (run.measured["output_tokens"] == OUTPUT_TOKENS).all()
    assert_harness_error_as_small_as_by_default(run, default_run)


# --- the reference target ----------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_reference_target_like_transformers_serve_completes_with_usage_counts(tmp_path):
    spec = tmp_path / "reference-variant.toml"
    spec.write_text(
        'name = "reference-variant"\n'
        '[target]\nkind = "reference"\napi = "chat"\n'
        "[target.reference]\nmax_running_requests = 4\n"
        'send_done = false\nusage = "end_only"\nrole_chunk = true\n'
        '[workload]\nnum_prompts = 8\n[workload.input_tokens]\ndist = "fixed"\nmean = 16\n'
        '[workload.output_tokens]\ndist = "fixed"\nmean = 12\n'
        "[load]\nlevels = [1, 2]\nduration_s = 3\nwarmup_s = 0.5\ncooldown_s = 0.3\n"
        # This test checks the records, not the 2-core host's event-loop lag.
        "[harness]\nmax_loop_lag_p99_s = 1.0\nmax_cpu_fraction = 1.0\n"
        "[export]\nlive_metrics = false\n"
    )
    run = moeperf_run(tmp_path / "runs", str(spec), timeout=240)
    assert run.result.returncode == 0, run.result.stdout[-3000:] + run.result.stderr[-3000:]
    assert set(run.summary.scenarios) == {"c=1", "c=2"}
    for scenario in run.summary.scenarios.values():
        assert scenario.ok > 0 and scenario.errors == 0
    requests = run.requests
    assert (requests["status"] == "ok").all()
    assert set(requests["stream_end"]) == {"finish_reason"}
    # The count is the usage on the finish_reason chunk: exactly what was asked for.
    assert (requests["output_tokens"] == 12).all()
    assert not (requests["chunk_tokens_source"] == "usage_stats").any()
    assert (requests["chunk_tokens"].map(lambda tokens: tokens[0]) == 0).all()  # the role
    # The first token is a later chunk's (the same read's, when the tiny model is quick).
    first_token_chunk = requests["chunk_tokens"].map(
        lambda tokens: next(i for i, n in enumerate(tokens) if n > 0)
    )
    assert (first_token_chunk >= 1).all()
    assert (requests["first_token_ns"] >= requests["chunk_ns"].map(lambda ns: ns[0])).all()
