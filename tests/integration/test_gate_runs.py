"""The gate on real runs over loopback: paired blocks of two synthetic targets, and A/A."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import gate_power
import pytest

from moeperf.cli import main
from moeperf.collectors.store import RunStore
from moeperf.gate_calibration import calibrate_command
from moeperf.gate_runs import (
    block_order,
    paired_command,
    paired_gate,
    parse_target,
)
from moeperf.specs import load_spec
from moeperf.suites.errors import SpecError, UsageError

pytestmark = pytest.mark.slow

# The gate, not the client's validity, is the subject here: beside another timing test on
# 2 cores with CPU steal, a worker's event-loop lag p99 reached 4-6 ms (> 2 ms) and the
# runs were client-bound, so the runs and the gate never got to the comparison.
CLIENT_LIMITS_OFF = ["harness.max_loop_lag_p99_s=1.0", "harness.max_cpu_fraction=1.0"]

# Short blocks: one level of 8 streams, 12 tokens per request, 2.5 s measured per block.
SHORT = [
    "load.levels=[8]",
    "load.duration_s=3.0",
    "load.warmup_s=0.5",
    "load.cooldown_s=0.0",
    "workload.input_tokens.mean=16",
    "workload.input_tokens.spread=0",
    "workload.output_tokens.mean=12",
    "workload.output_tokens.spread=0",
    "workload.num_prompts=32",
    "export.live_metrics=false",
    "export.scrape_target=false",
    *CLIENT_LIMITS_OFF,
]


@pytest.mark.timing
def test_paired_blocks_detect_a_20_percent_itl_regression(tmp_path):
    lines: list[str] = []
    code = paired_command(
        "synthetic",
        "synthetic:itl_s=0.010",
        "synthetic:itl_s=0.012",
        2,
        tmp_path / "runs",
        SHORT,
        tmp_path / "gate",
        out=lines.append,
    )
    assert code == 1
    body = json.loads((tmp_path / "gate" / "gate.json").read_text())
    verdicts = {v["key"]: v for v in body["verdicts"]}
    itl = verdicts["c=8/itl_s p50"]
    assert itl["outcome"] == "regression"
    assert itl["ratio"] == pytest.approx(1.2, abs=0.05)
    # TTFT is configured the same on both sides: no regression there.
    assert verdicts["c=8/ttft_s p50"]["outcome"] != "regression"
    assert [len(body["runs"]["a"]), len(body["runs"]["b"])] == [2, 2]
    assert body["order"] == "abba"
    assert any("REGRESSION c=8/itl_s p50" in line for line in lines)


# The nightly spec, shortened: one level of 8 streams, 2.5 s measured, 64 tokens per request
# at 10 ms, and almost no TTFT, so that 10% slower tokens are about 10% less throughput;
# the streams ramp over the shorter warm-up.
NIGHTLY_SHORT = [
    "load.levels=[8]",
    "load.duration_s=3.0",
    "load.warmup_s=0.5",
    "load.ramp_s=0.5",
    "load.cooldown_s=0.0",
    "target.synthetic.ttft_s=0.001",
    "export.live_metrics=false",
    "export.scrape_target=false",
    *CLIENT_LIMITS_OFF,
]


@dataclass(frozen=True)
class GatedPair:
    """A baseline run of the short nightly and a candidate run, gated against it."""

    runs: Path
    baseline_id: str
    candidate_id: str
    code: int
    text: str  # the gate's output (gate.txt)
    verdicts: dict[str, dict]


@pytest.fixture(scope="module")
def slower_and_late(tmp_path_factory) -> GatedPair:
    # One candidate, two changes the gate must each find on its own metric:
    # - the synthetic target's token pace 10% slower (itl_s, not a compared spec field);
    # - the client waiting 3 ms before every send (calibrate's planted delay). It comes
    #   before the send's stamp, so the per-request output rate (output tokens / (done -
    #   send)) does not see it, and the slower pace leaves the first token's error alone.
    tmp = tmp_path_factory.mktemp("gated")
    runs, baselines = tmp / "runs", tmp / "baselines"
    common = ["--runs-dir", str(runs)]
    assert main([*common, "run", "nightly", *_sets(NIGHTLY_SHORT)]) == 0
    (baseline_id,) = (r.run_id for r in RunStore(runs).list())
    changed = [*NIGHTLY_SHORT, "target.synthetic.itl_s=0.011", "harness.planted_send_delay_s=0.003"]
    assert main([*common, "run", "nightly", *_sets(changed)]) == 0
    (candidate_id,) = (r.run_id for r in RunStore(runs).list() if r.run_id != baseline_id)
    promote = ["baseline", "promote", baseline_id, "--name", "t", "--baselines-dir"]
    assert main([*common, *promote, str(baselines)]) == 0
    gate = ["gate", candidate_id, "--baseline", "t", "--baselines-dir", str(baselines)]
    code = main([*common, *gate])
    body = json.loads((runs / candidate_id / "gate.json").read_text())
    verdicts = {v["key"]: v for v in body["verdicts"]}
    text = (runs / candidate_id / "gate.txt").read_text()
    return GatedPair(runs, baseline_id, candidate_id, code, text, verdicts)


@pytest.mark.timing
def test_a_10_percent_throughput_drop_fails_the_gate(slower_and_late):
    # The issue: throughput could never fail the gate (4-5 one-second bins per nightly level,
    # 8 needed); a real 15% drop stayed inconclusive.
    pair = slower_and_late
    assert pair.code == 1
    assert "FAIL:" in pair.text
    rate = pair.verdicts["c=8/request_output_tok_s mean"]
    assert rate["outcome"] == "regression"
    assert rate["ratio"] == pytest.approx(0.91, abs=0.03)
    # The headline is the run summary's number on both sides, shown and not tested.
    headline = pair.verdicts["c=8/output_tok_s tokens/window"]
    assert headline["outcome"] == "reported"
    for run_id, side in ((pair.baseline_id, "baseline"), (pair.candidate_id, "candidate")):
        summary = json.loads((pair.runs / run_id / "summary.json").read_text())
        tok_s = summary["scenarios"]["c=8"]["output_throughput_tok_s"]
        assert headline[side] == pytest.approx(tok_s, rel=1e-9)


@pytest.mark.timing
def test_a_harness_that_sends_late_fails_the_gate_on_its_own_error(slower_and_late):
    # The target is as fast to its first token on both sides, so only the harness's own
    # error (~0.5-1 ms p50 here) grows, some 4x, past the "harness" class's 100% minimum
    # effect: 3 ms more of the harness's own, the baseline's plus ~3 ms.
    error = slower_and_late.verdicts["c=8/harness_ttft_error_s p50"]
    assert error["outcome"] == "regression", error
    assert error["candidate"] - error["baseline"] == pytest.approx(0.003, abs=0.001)
    assert "REGRESSION c=8/harness_ttft_error_s p50" in slower_and_late.text


@pytest.mark.timing
def test_the_power_study_runs_every_condition_and_sees_the_large_ones(tmp_path, capsys):
    # One trial per condition of the study behind the power table of
    # docs/concepts/gate-statistics.md, on the
    # shortened nightly spec (the table itself is `tox -e gate-power`, about an hour).
    short = [o for o in NIGHTLY_SHORT if not o.startswith("target.synthetic.ttft_s")]
    code = gate_power.main(
        ["--trials", "1", "--baselines", "1", "--runs-dir", str(tmp_path / "runs"),
         "--json", str(tmp_path / "trials.json"), *_sets(short)]
    )  # fmt: skip
    assert code == 0
    trials = {t["condition"]: t for t in json.loads((tmp_path / "trials.json").read_text())}
    assert list(trials) == [c.label for c in gate_power.CONDITIONS]
    # 10% slower per request and 10% slower tokens: far outside their minimum effects.
    for label in ("throughput -10%", "TPOT p50 +10%"):
        assert trials[label]["detected"] is True and trials[label]["status"] == "fail", label
    assert trials["A/A"]["detected"] is None
    assert "c=8/request_output_tok_s mean" in trials["throughput -10%"]["regressions"]
    # Every candidate was gated against the one baseline, and the table has every row.
    assert {t["baseline_run"] for t in trials.values()} == {trials["A/A"]["baseline_run"]}
    out = capsys.readouterr().out
    for label in trials:
        assert label in out
    # The same runs judged again, with a minimum effect no 10% drop can pass: not flagged.
    again = tmp_path / "again.json"
    regate = ["--regate", str(tmp_path / "trials.json"), "--runs-dir", str(tmp_path / "runs"),
              "--min-effect", "throughput=0.5", "--json", str(again)]  # fmt: skip
    assert gate_power.main(regate) == 0
    judged = {t["condition"]: t for t in json.loads(again.read_text())}
    assert judged["throughput -10%"]["candidate_run"] == trials["throughput -10%"]["candidate_run"]
    assert judged["throughput -10%"]["detected"] is False
    assert "minimum effects throughput=0.5" in capsys.readouterr().out


def test_the_power_study_refuses_a_spec_without_a_synthetic_target(tmp_path, capsys):
    code = gate_power.main(["--runs-dir", str(tmp_path), "--set", "target.kind=url",
                            "--set", "target.url=http://127.0.0.1:9"])  # fmt: skip
    assert code == 2
    assert "injects its regressions into the synthetic target" in capsys.readouterr().out
    assert not any(tmp_path.iterdir())


def _sets(overrides: list[str]) -> list[str]:
    return [arg for o in overrides for arg in ("--set", o)]


@pytest.mark.timing
def test_a_over_a_flags_nothing(tmp_path):
    lines: list[str] = []
    overrides = [*SHORT, "target.synthetic.jitter=lognormal", "target.synthetic.jitter_scale=0.1"]
    # ITL p99 per token moves with the host's scheduling (collectors/min_effects.py): in
    # these 3-second levels on a shared 2-core host, identical runs measured an ITL p99
    # ratio of 1.237 [1.118, 1.306] (2026-12-01), and one CI run's interval passed the
    # default 20%. A spec of such short levels sets its ITL p99 minimum effect itself.
    assert (
        calibrate_command(
            "synthetic",
            2,
            tmp_path / "runs",
            overrides,
            tmp_path,
            min_effects={"itl_s_p99": 0.35},
            out=lines.append,
        )
        == 0
    )
    body = json.loads((tmp_path / "calibration.json").read_text())
    assert body["comparisons"] > 0
    assert body["false_positives"] == 0
    assert "A/A false positives: 0 of" in "\n".join(lines)


def test_targets_and_block_orders():
    spec = load_spec("synthetic", SHORT).serving
    assert parse_target("http://127.0.0.1:8000", spec).url == "http://127.0.0.1:8000"
    assert parse_target("url:http://h:1", spec).url == "http://h:1"
    synthetic = parse_target("synthetic:itl_s=0.011,tokens_per_chunk=2", spec).synthetic
    assert synthetic is not None
    assert synthetic.itl_s == 0.011 and synthetic.tokens_per_chunk == 2
    assert synthetic.ttft_s == spec.target.synthetic.ttft_s
    choice = parse_target('synthetic:{"ttft_s": 0.2}', spec)
    assert choice.synthetic is not None and choice.synthetic.ttft_s == 0.2
    with pytest.raises(UsageError, match="valid fields"):
        parse_target("synthetic:itl=0.01", spec)
    with pytest.raises(UsageError, match="expected a URL"):
        parse_target("ftp://x", spec)
    assert block_order(3, "abba") == list("abbaab")
    assert block_order(2, "abab") == list("abab")
    with pytest.raises(UsageError, match="valid orders"):
        block_order(2, "aabb")
    with pytest.raises(UsageError):
        paired_gate("synthetic", "synthetic", "synthetic", 0)


def test_paired_and_a_over_a_specs_are_validated_before_any_target_starts(tmp_path):
    rates = ["target.synthetic.error_rate=0.7", "target.synthetic.stall_rate=0.7"]
    flags = "--set target.synthetic.error_rate=0.7, --set target.synthetic.stall_rate=0.7"
    with pytest.raises(SpecError) as info:
        paired_gate("synthetic", "synthetic", "synthetic", 1, tmp_path / "runs", [*SHORT, *rates])
    assert str(info.value).startswith(f"{flags}: target.synthetic.error_rate + stall_rate")
    with pytest.raises(SpecError, match="did you mean 'duration_s'"):
        calibrate_command("synthetic", 1, tmp_path / "runs", ["load.duraton_s=1"], tmp_path)
    assert not (tmp_path / "runs").exists()
