"""A sweep over prompt lengths against the synthetic target, whose limits are known: a
length past a context limit is "not available from this target" (never sent, in the
summary, the terminal and the report), and the fit search finds the target's known
number of concurrent streams (``max_concurrent_streams``: at most N answered at once,
the rest queued, as its running-requests gauge says)."""

from __future__ import annotations

import pytest

from moeperf.cli import main
from moeperf.collectors.serving_records import ServingSummary
from moeperf.collectors.store import RunStore

SYNTHETIC = [
    "--set", "target.kind=synthetic", "--set", "target.synthetic.jitter=none",
    "--set", "target.synthetic.ttft_s=0.01", "--set", "target.synthetic.itl_s=0.01",
    "--set", "workload.tokenizer=server", "--set", "workload.output_tokens.mean=8",
    "--set", "load.levels=[1]", "--set", "load.max_requests=4",
    "--set", "harness.max_loop_lag_p99_s=1.0", "--set", "harness.max_cpu_fraction=1.0",
]  # fmt: skip


def _summary(runs) -> ServingSummary:
    summary = RunStore(runs).open("latest").summary()
    assert isinstance(summary, ServingSummary) and summary.sweep is not None
    return summary


@pytest.mark.timeout(120)
def test_a_length_past_the_context_limit_is_not_available_and_not_sent(tmp_path, capsys):
    code = main([
        "--runs-dir", str(tmp_path), "run", "prefill", *SYNTHETIC,
        # The synthetic target states 1,000,000 tokens: the spec's limit wins.
        "--set", "sweep.input_tokens.context_tokens=128",
        "--set", "sweep.input_tokens.values=[16, 64, 500]",
    ])  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 0, printed[-3000:]
    sweep = _summary(tmp_path).sweep
    assert sweep is not None
    assert (sweep.context_tokens, sweep.context_source) == (
        128,
        "spec: sweep.input_tokens.context_tokens",
    )
    sent = [p for p in sweep.points if p.not_available is None]
    assert [p.input_tokens for p in sent] == [16, 64]
    (missing,) = sweep.not_available()
    assert missing.input_tokens == 500 and missing.scenarios == ()
    assert missing.not_available == (
        "not available from this target: 500 prompt + 8 output tokens exceed its context "
        "limit of 128 tokens (spec: sweep.input_tokens.context_tokens)"
    )
    assert list(_summary(tmp_path).scenarios) == ["in=16 c=1", "in=64 c=1"]
    assert "not available from this target" in printed
    assert main(["--runs-dir", str(tmp_path), "report", "latest"]) == 0
    page = (RunStore(tmp_path).open("latest").directory / "report.html").read_text()
    assert "not available from this target: 500 prompt" in page


@pytest.mark.slow
@pytest.mark.timing
@pytest.mark.timeout(120)
def test_the_fit_search_finds_the_targets_known_concurrent_streams(tmp_path, capsys):
    code = main([
        "--runs-dir", str(tmp_path), "run", "prefill", *SYNTHETIC,
        "--set", "target.synthetic.max_concurrent_streams=3",
        "--set", "sweep.input_tokens.values=[32]",
        "--set", "sweep.fit={start = 2, probe_s = 1.0}",
        "--set", "export.scrape_interval_s=0.1",
    ])  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 0, printed[-3000:]
    summary = _summary(tmp_path)
    sweep = summary.sweep
    assert sweep is not None
    fit = sweep.points[0].fit
    assert fit is not None and fit.status == "resolved", fit
    assert (fit.passed_level, fit.failed_level) == (3, 4)
    assert [p.level for p in fit.probes] == [2, 4, 3]
    failed = next(p for p in fit.probes if p.level == 4)
    assert failed.reason.startswith("at most 3 of 4 running at once")
    # It exports no preemptions counter: said so, and judged on the running gauge alone.
    assert "preemptions not available from this target" in failed.reason
    assert "in=32 fit c=4" in summary.scenarios
    assert summary.scenarios["in=32 fit c=4"].input_tokens == 32
    assert "3 fit, 4 did not" in printed
    assert main(["--runs-dir", str(tmp_path), "report", "latest"]) == 0
    page = (RunStore(tmp_path).open("latest").directory / "report.html").read_text()
    assert "Concurrent requests that fit at each prompt length" in page
    assert "3 fit, 4 did not" in page
