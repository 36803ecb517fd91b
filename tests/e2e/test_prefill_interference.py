"""``moeperf run prefill-interference`` on the embedded reference engine: a long prompt
prefilled whole stalls the requests decoding beside it, and chunking its prefill trades
that stall for the long prompt's own TTFT.

Two arms (the target restarted with each chunked-prefill size, the same step budget):
0, every 1,536-token prompt in one step, and 64 tokens per step. With whole prompts a
step that prefills one takes hundreds of ms, and every decoding stream waits for it: one
long gap per stream per arriving prompt, 2 per second against one gap per ITL (about
10 ms), so about 2% of the gaps, and the decoders' ITL p99 with prompts arriving
("mixed") lies far above their p99 alone ("quiet"), intervals apart. With 64-token
chunks each step adds a little to every gap instead, so the mixed p99 falls, intervals
apart from the whole-prompt one; and the long prompt needs 24 steps instead of one, so
its TTFT p50 rises.

The test sends the long prompts at 3 per second, not the spec's 2: the whole-prompt arm's
p99 interval stands clear of the undisturbed gaps only while the stalls are well over 1% of
the gaps, and at 2/s they were 1.8% (16 prompts in a phase, Poisson): two clean-clone CI
runs saw the interval reach down to 12.8 and 23 ms, among the plain gaps. At 3/s they were
4.8% (interval 221-276 ms against the chunked arm's 59-80 ms), every level still valid.
"""

from __future__ import annotations

import pytest

from moeperf.cli import main
from moeperf.collectors.interference_rows import interference_rows
from moeperf.collectors.serving_records import ServingSummary
from moeperf.collectors.store import RunStore


@pytest.mark.timing
@pytest.mark.slow
@pytest.mark.timeout(400)
def test_chunking_the_prefill_trades_decode_stalls_for_prompt_ttft(tmp_path, capsys):
    code = main([
        "--runs-dir", str(tmp_path), "run", "prefill-interference",
        "--set", "interference.chunked_prefill_sizes=[0, 64]",
        "--set", "interference.prefill_rate=3.0",
        "--set", "harness.max_loop_lag_p99_s=1.0", "--set", "harness.max_cpu_fraction=1.0",
    ])  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 0, printed[-3000:]
    reader = RunStore(tmp_path).open("latest")
    summary = reader.summary()
    assert isinstance(summary, ServingSummary) and summary.interference is not None
    assert [a.chunked_prefill_size for a in summary.interference.arms] == [0, 64]
    assert summary.interference.max_num_batched_tokens == 1536 + 4
    for arm in summary.interference.arms:
        for name in (arm.quiet_scenario, arm.decode_scenario, arm.prefill_scenario):
            entry = summary.scenarios[name]
            assert entry.ok > 0 and entry.errors == 0, (name, entry.error_types)
    whole, chunked = interference_rows(summary.interference, summary.scenarios)
    for row in (whole, chunked):
        assert row.quiet_itl_p99_s is not None and row.mixed_itl_p99_s is not None
        assert row.prefill_ttft_p50_s is not None
    assert whole.mixed_itl_p99_s is not None and whole.quiet_itl_p99_s is not None
    assert chunked.mixed_itl_p99_s is not None
    stalled_low = whole.mixed_itl_p99_s.ci_low
    quiet_high = whole.quiet_itl_p99_s.ci_high
    assert stalled_low is not None and quiet_high is not None
    assert stalled_low > quiet_high, (whole, "no stall seen")
    chunked_high = chunked.mixed_itl_p99_s.ci_high
    assert chunked_high is not None and chunked_high < stalled_low, (whole, chunked)
    assert chunked.prefill_ttft_p50_s is not None and whole.prefill_ttft_p50_s is not None
    assert chunked.prefill_ttft_p50_s.value > whole.prefill_ttft_p50_s.value
    assert "prefill interference" in printed
    # [telemetry] per level: the process source followed each arm's restarted target, and
    # the mixed level's figures are over both of its scenarios (they share every second).
    requests = reader.requests()
    measured = requests[requests["phase"] == "measure"]
    pids = []
    for arm in summary.interference.arms:
        for level, names in (
            (arm.quiet_accelerator, [arm.quiet_scenario]),
            (arm.mixed_accelerator, [arm.decode_scenario, arm.prefill_scenario]),
        ):
            assert level is not None, names
            mine = measured[measured["scenario"].isin(names)]
            assert (level.start_ns, level.end_ns) == (mine["send_ns"].min(), mine["done_ns"].max())
            assert level.tokens == sum(summary.scenarios[n].output_tokens for n in names)
            assert level.requests == sum(summary.scenarios[n].ok for n in names)
            (target,) = level.devices
            assert target.source == "process" and target.rss_peak_bytes, target
            pids.append(target.device)
            assert all(summary.scenarios[n].accelerator is None for n in names)
    assert pids[0] == pids[1] != pids[2] == pids[3], pids  # one process per arm
    main(["--runs-dir", str(tmp_path), "runs", "show", "latest", "--verbose"])
    assert "chunk=64 mixed: target process pid:" in capsys.readouterr().out
    # Each arm's target was started with its own size; the run says so.
    assert reader.manifest.target["arms"] == {"chunked_prefill_size": [0, 64]}
    assert any(
        n.startswith("Prefill interference: the reference target restarted")
        for n in reader.manifest.notes
    )
