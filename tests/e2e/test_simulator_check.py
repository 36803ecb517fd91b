"""The cluster simulator against the reference trainer: the shipped CI-sized training spec
(training-oom: four policies under calm and spiky routing, a budget 1.01 x keep-all's calm
peak) run through the CLI, every scenario predicted by the simulator configured as the
trainer (targets/cluster_sim/reference.py) and compared with what was measured.

Issue 18's bar, per policy and skew: peak memory within 5% and step time within 10%. Peak
and OOMs are deterministic (the same samples, routing and ledger), so this test holds the
peak to 5% and the OOM count to the trainer's exactly.

Step time is wall time on a shared 2-core host whose pace drifts by tens of percent over
minutes: run one after another, the same work measured 20% apart in two scenarios of one
run, and a CI run missed by 37.7% with the model unchanged. The spec now runs its
scenarios interleaved, and each one's step is taken at the fitted scenario's pace (the
median ratio of their steps in the same rounds), which cancels the drift; what is left is
step-to-step jitter (about 8% per step here), a few percent on a median of 7 ratios. So
the test holds each scenario's step error to 10% unless its 95% interval says the miss is
noise: a prediction that is off by more than 10% beyond doubt fails it, and every error
is printed with its interval.

In the test suite the matrix is keep-all and adaptive under both skews, at sequences of
128 tokens instead of 256 and 2 micro-batches a step instead of 4 (an eighth of the work):
keep-all is the fitted scenario and the one that runs out of memory, adaptive the policy
whose plan the simulator makes itself. Every scenario keeps its 8 steps, so each claim
keeps its power per scenario: the budget is still 1.01 x keep-all/calm's own peak (about
600 MiB here) and the spiky micro-batches still cross it (2 OOMs, predicted 2; 3 with 4
micro-batches); the step-error intervals were as wide or narrower (side by side on a quiet
host, issue 48: 2 micro-batches -12.2% to +6.8% at the widest, the whole run 81 s; 4
micro-batches -11.2% to +30.7%, 120 s; the 256-token run in docs/targets/simulator.md:
-8.6% to +5.7% and up to +-30%).
``tox -e sim-check`` (MOEPERF_FULL_SIZE=1) runs the whole spec, four policies at 256
tokens, as docs/targets/simulator.md reports.
"""

from __future__ import annotations

import os

import pytest

from moeperf.cli import main
from moeperf.collectors.store import RunStore
from moeperf.collectors.training_summary import TrainingSummary

# The whole spec (tox -e sim-check), or its CI-sized matrix (the module docstring).
FULL_SIZE = os.environ.get("MOEPERF_FULL_SIZE") == "1"
POLICIES = ("keep-all", "full-recompute", "selective", "adaptive") if FULL_SIZE else (
    "keep-all", "adaptive"
)  # fmt: skip
SIZE = () if FULL_SIZE else ("--set", "trainer.seq_len=128", "--set", "trainer.microbatches=2")


@pytest.mark.slow
# The whole training-oom spec: about 4.5 minutes on 2 quiet cores of a host whose float32
# matmul runs 155 GFLOP/s, 9.5 minutes (567 s) on one of 63 GFLOP/s (AVX2 only; hosts
# differ); the test suite's matrix 81-86 s on the latter (issue 48). The whole spec is past
# the suite's 300 s default.
@pytest.mark.timing
# The trainer keeps ~1.8 cores busy: beside another timing test it would measure both.
@pytest.mark.alone
@pytest.mark.timeout(900)
def test_the_simulator_predicts_the_ci_sized_training_spec(tmp_path, capsys):
    runs = tmp_path / "runs"
    policies = "[" + ", ".join(f'"{p}"' for p in POLICIES) + "]"
    argv = ["--runs-dir", str(runs), "run", "training-oom", "--set", f"matrix.policies={policies}",
            *SIZE]  # fmt: skip
    assert main(argv) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "cluster simulator (simulated) against the trainer (measured)" in out

    reader = RunStore(runs).open("latest")
    summary = reader.summary()
    assert isinstance(summary, TrainingSummary) and summary.simulator is not None
    check = summary.simulator
    assert check.not_predicted == {}
    assert list(check.scenarios) == list(summary.scenarios)
    assert sorted({s.policy for s in summary.scenarios.values()}) == sorted(POLICIES)
    # The efficiency is fitted on keep-all/calm's steps; every other scenario is predicted.
    assert [n for n, p in check.scenarios.items() if p.fitted] == ["keep-all/calm"]
    assert summary.scenarios["keep-all/spiky"].ooms >= 1  # the spec still exercises OOMs

    steps = reader.steps()
    for name, p in check.scenarios.items():
        assert p.peak_error is not None and abs(p.peak_error) <= check.peak_tolerance, (name, p)
        assert p.predicted_ooms == p.measured_ooms, (name, p)
        assert p.step_error is not None, (name, p)  # predicted and measured, both present
        own = steps[steps["scenario"] == name]
        times_s = (own["end_ns"] - own["start_ns"]) / 1e9
        spread = float(times_s.quantile(0.9) / times_s.quantile(0.1) - 1)
        if p.fitted:
            continue
        assert p.paired_rounds == 7 and p.step_error_ci is not None, (name, p)
        low, high = p.step_error_ci
        print(f"{name}: step error {p.step_error:+.1%} (95% CI {low:+.1%} to {high:+.1%}), "
              f"own step spread {spread:.1%}")  # fmt: skip
        # Off by more than the tolerance beyond the interval's doubt: a wrong prediction.
        assert -check.step_tolerance <= high and low <= check.step_tolerance, (name, p)

    page = tmp_path / "report.html"
    assert main(["--runs-dir", str(runs), "report", reader.run_id, "--out", str(page)]) == 0
    assert "Simulator against measurement" in page.read_text()
