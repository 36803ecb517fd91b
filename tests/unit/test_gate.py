"""The gate on seeded synthetic samples, and on runs written to a store."""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import TypeVar

import numpy as np
import pytest

from moeperf.collectors.records import RequestRecord, SampleRecord, StepRecord
from moeperf.collectors.store import RunStore
from moeperf.collectors.summary import summarize_requests
from moeperf.reports.comparability import check_fingerprints
from moeperf.reports.compare import compare_command, compare_runs
from moeperf.reports.errors import ReportUsageError
from moeperf.reports.gate import gate
from moeperf.reports.gate_output import format_gate, gate_command
from moeperf.reports.runs import load_run
from moeperf.reports.samples import MetricSamples, pool_samples, run_samples

S = 1_000_000_000
T = TypeVar("T")


def known(value: T | None) -> T:
    """A statistic the gate computed (None only where a metric was not tested)."""
    assert value is not None
    return value


def latency(name: str, values, statistic: str = "p50") -> MetricSamples:
    return MetricSamples(name, statistic, values, "lower", "latency", "s")


def throughput(values) -> MetricSamples:
    return MetricSamples(
        "c=1/request_output_tok_s", "mean", values, "higher", "throughput", "tok/s"
    )


def sides(factor: float, seed: int, n: int = 2000):
    """Baseline and candidate latency metrics; the candidate's values scaled by factor."""
    rng = np.random.default_rng(seed)
    base = rng.lognormal(np.log(0.01), 0.3, n)
    cand = rng.lognormal(np.log(0.01), 0.3, n) * factor
    stats = ("p50", "p99")
    return (
        [latency("c=1/itl_s", cand, s) for s in stats],
        [latency("c=1/itl_s", base, s) for s in stats],
    )


def outcomes(result) -> dict[str, str]:
    return {v.key: v.outcome for v in result.verdicts}


def test_an_injected_regression_is_detected():
    # 10% on a 5% minimum effect; p99's default minimum effect is 20% (tails are noisy).
    result = gate(*sides(1.10, seed=1))
    assert outcomes(result)["c=1/itl_s p50"] == "regression"
    assert outcomes(result)["c=1/itl_s p99"] != "regression"
    assert result.exit_code == 1
    verdict = result.verdicts[0]
    assert verdict.ratio == pytest.approx(1.10, abs=0.02)
    assert 1.05 < known(verdict.ci_low) < known(verdict.ratio) < known(verdict.ci_high)
    assert known(verdict.q_value) < 0.05 and verdict.test == "mann-whitney"
    text = format_gate(result)
    assert "REGRESSION c=1/itl_s p50" in text and "FAIL" in text


def test_an_injected_tail_regression_is_detected():
    # p99 needs many samples for its interval to clear its minimum effect.
    result = gate(*sides(1.30, seed=1, n=20_000))
    assert outcomes(result)["c=1/itl_s p99"] == "regression"
    p99 = result.verdicts[1]
    assert p99.min_effect == 0.20 and known(p99.test).startswith("brown-mood")
    assert known(p99.ci_low) > 1.2
    # With a 5% minimum effect for every latency, 10% on p99 is a regression too.
    strict = gate(*sides(1.10, seed=1, n=20_000), min_effects={"latency": 0.05})
    assert outcomes(strict)["c=1/itl_s p99"] == "regression"


def test_a_significant_change_below_the_minimum_effect_says_so_and_does_not_fail():
    result = gate(*sides(1.02, seed=2, n=20_000))
    assert result.exit_code == 0
    p50 = result.verdicts[0]
    assert known(p50.q_value) < 0.05  # significant: the samples do differ
    assert known(p50.ci_high) < 1.05  # but the interval excludes a 5% regression
    assert p50.outcome == "significant, below minimum effect"  # was "no change"
    assert "within the 5% minimum effect" in p50.reason


def test_a_16_percent_p99_rise_under_a_20_percent_minimum_effect_is_not_no_change():
    # The case: ITL p99 +16%, CI about 1.14-1.18, q tiny, minimum effect 20%.
    result = gate(*sides(1.16, seed=8, n=200_000))
    p99 = next(v for v in result.verdicts if v.statistic == "p99")
    assert p99.min_effect == 0.20
    assert known(p99.ci_low) > 1.10 and known(p99.ci_high) < 1.20
    assert known(p99.q_value) < 1e-6
    assert p99.outcome == "significant, below minimum effect"
    body = result.to_dict()
    assert body["counts"]["significant, below minimum effect"] >= 1
    assert {v["key"]: v["outcome"] for v in body["verdicts"]}["c=1/itl_s p99"] == p99.outcome
    text = format_gate(result)
    assert "significant, below minimum effect" in text
    assert "significant, below minimum effect" in body["rule"]


def test_improvement_is_not_a_failure():
    result = gate(*sides(0.70, seed=3))
    assert set(outcomes(result).values()) == {"improvement"}
    assert result.exit_code == 0


def test_throughput_drop_is_a_regression_and_a_rise_an_improvement():
    rng = np.random.default_rng(4)
    base = rng.normal(1000, 30, 60)
    down = gate([throughput(rng.normal(850, 30, 60))], [throughput(base)])
    up = gate([throughput(rng.normal(1150, 30, 60))], [throughput(base)])
    assert down.verdicts[0].outcome == "regression" and down.exit_code == 1
    assert up.verdicts[0].outcome == "improvement" and up.exit_code == 0


def test_no_change_is_not_flagged_over_many_seeds():
    seeds, alpha = 200, 0.05
    flagged = significant = 0
    flagged_without_min_effect = 0
    for seed in range(seeds):
        cand, base = sides(1.0, seed=1000 + seed, n=800)
        tput_rng = np.random.default_rng(seed)
        cand.append(throughput(tput_rng.normal(1000, 30, 30)))
        base.append(throughput(tput_rng.normal(1000, 30, 30)))
        result = gate(cand, base, alpha=alpha, seed=seed)
        flagged += bool(result.regressions)
        significant += any(known(v.q_value) < alpha for v in result.verdicts)
        no_floor = gate(cand, base, alpha=alpha, min_effects={"latency": 0, "throughput": 0})
        flagged_without_min_effect += bool(no_floor.regressions)
    tolerance = 3 * np.sqrt(alpha * (1 - alpha) / seeds)  # three standard errors: 0.046
    # With the minimum effect the rate is far below alpha (1 in 1000 seeds when measured).
    assert flagged / seeds <= 0.01
    assert significant / seeds <= alpha + tolerance  # BH holds the family-wise rate
    assert flagged_without_min_effect / seeds <= alpha + tolerance


def test_too_few_samples_are_inconclusive_even_for_a_large_change():
    rng = np.random.default_rng(5)
    base, cand = rng.lognormal(size=200), rng.lognormal(size=200) * 2
    result = gate(
        [latency("x", cand, "p99"), latency("y", cand[:5], "p50")],
        [latency("x", base, "p99"), latency("y", base[:5], "p50")],
    )
    assert outcomes(result) == {"x p99": "inconclusive", "y p50": "inconclusive"}
    assert "368 needed" in result.verdicts[0].reason
    assert result.verdicts[0].p_value is None
    # Nothing judged: the gate cannot vouch for the run, so no PASS (exit 1).
    assert result.status == "inconclusive" and result.exit_code == 1
    text = format_gate(result)
    assert "PASS" not in text and "INCONCLUSIVE: only 0 of 2 metrics judged" in text


def test_a_wide_interval_past_the_minimum_effect_is_inconclusive_not_no_change():
    rng = np.random.default_rng(6)
    base, cand = rng.lognormal(0, 1, 30), rng.lognormal(0, 1, 30)
    verdict = gate([latency("x", cand)], [latency("x", base)]).verdicts[0]
    assert known(verdict.ci_high) > 1.05
    assert verdict.outcome == "inconclusive"


def test_benjamini_hochberg_changes_the_decision():
    rng = np.random.default_rng(4)
    base = rng.lognormal(0, 0.5, 400)
    cand = rng.lognormal(0, 0.5, 400) * 1.12
    alone = gate([latency("x", cand)], [latency("x", base)], min_effects={"latency": 0.0})
    (verdict,) = alone.verdicts
    assert 0.01 < known(verdict.p_value) < 0.05 and verdict.outcome == "regression"
    # Nine more metrics without any change: the same p-value no longer survives.
    nulls = [latency(f"null{i}", rng.lognormal(size=400)) for i in range(9)]
    many = gate(
        [latency("x", cand), *nulls],
        [latency("x", base), *nulls],
        min_effects={"latency": 0.0},
    )
    x = next(v for v in many.verdicts if v.name == "x")
    assert x.p_value == verdict.p_value
    assert known(x.q_value) > 0.05 and x.outcome == "inconclusive"
    assert not many.regressions


def test_a_metric_missing_from_the_candidate_fails_and_one_only_in_it_does_not():
    base = [latency("a", np.ones(50)), latency("b", np.ones(50))]
    cand = [latency("b", np.ones(50)), latency("c", np.ones(50))]
    result = gate(cand, base)
    assert outcomes(result) == {
        "a p50": "missing from candidate",
        "b p50": "no change",
        "c p50": "only in candidate",
    }
    assert result.by_outcome("missing from candidate")[0].reason == "not in the candidate"
    assert result.exit_code == 1 and result.status == "fail"
    assert "MISSING FROM CANDIDATE a p50" in format_gate(result)
    # Only the candidate's extra metric: informational.
    assert gate(cand, [latency("b", np.ones(50))]).exit_code == 0


def test_no_pass_with_40_of_48_metrics_missing():
    # The case: a run of another spec, forced past the spec check, lacked 40 of the
    # baseline's 48 metrics and printed "PASS: no regression (exit 0)".
    rng = np.random.default_rng(9)
    names = ["ttft_s", "tpot_s", "itl_s", "e2e_s"]

    def level(scenario: str) -> list[MetricSamples]:
        return [
            # No level= here: the same call runs on the gate before this change.
            MetricSamples(f"{scenario}/{n}", s, rng.lognormal(0, 0.1, 400), "lower", "latency",
                          "s")
            for n in names
            for s in ("p50", "p90")
        ]  # fmt: skip

    base = [m for c in (1, 2, 4, 8, 16, 32) for m in level(f"c={c}")]
    cand = level("c=1")
    assert (len(base), len(cand)) == (48, 8)
    result = gate(cand, base)
    assert len(result.by_outcome("missing from candidate")) == 40
    assert result.exit_code == 1
    text = format_gate(result)
    assert "PASS" not in text
    assert "FAIL: 40 metric(s) missing from candidate; 8 of 48 metrics judged (exit 1)" in text
    assert "judged 8 of 48 required metrics" in text
    assert result.to_dict()["judged"] == 8 and result.to_dict()["required"] == 48


def test_a_level_without_samples_in_the_candidate_is_missing_not_inconclusive():
    base = [latency("c=1/ttft_s", np.ones(50)), latency("c=8/ttft_s", np.ones(50))]
    cand = [latency("c=1/ttft_s", np.ones(50)), latency("c=8/ttft_s", [])]
    verdict = gate(cand, base).verdicts[1]
    assert verdict.outcome == "missing from candidate"
    assert verdict.reason == "no samples in the candidate"


def test_an_optional_metric_may_be_missing():
    def mfu(values) -> MetricSamples:
        return MetricSamples("mfu", "mean", values, "higher", "training", "1", kind="optional")

    step = [latency("step_time_s", np.ones(50), "median")]
    result = gate(step, [*step, mfu(np.full(50, 0.4))])
    assert outcomes(result)["mfu mean"] == "optional, missing from candidate"
    assert result.exit_code == 0 and len(result.required) == 1


def test_pass_needs_half_the_metrics_and_every_level_judged():
    rng = np.random.default_rng(10)

    def metric(scenario: str, name: str, n: int) -> MetricSamples:
        values = rng.lognormal(0, 0.05, n)
        return MetricSamples(f"{scenario}/{name}", "p50", values, "lower", "latency", "s",
                             level=scenario)  # fmt: skip

    # c=1 judged (400 samples), c=8 only 5 samples per metric: nothing judged there.
    both = [metric("c=1", "a", 400), metric("c=1", "b", 400), metric("c=8", "a", 5)]
    result = gate(both, both)
    assert len(result.judged) == 2 and result.status == "inconclusive"
    assert result.coverage_problem == "no metric judged at c=8"
    assert result.exit_code == 1
    # Every level judged, but only 2 of 5 metrics: below the 50% floor.
    few = [metric("c=1", "a", 400), *(metric("c=1", n, 5) for n in "bcd"), metric("c=8", "a", 400)]
    share = gate(few, few)
    assert share.coverage_problem == "only 2 of 5 metrics judged (40% < 50%)"
    assert "INCONCLUSIVE" in format_gate(share) and share.exit_code == 1


def test_fingerprint_mismatch_is_refused_unless_forced():
    here = {"cpu_model": "X", "logical_cores": 8, "gpus": []}
    there = {"cpu_model": "Y", "logical_cores": 8, "gpus": [{"name": "H100"}]}
    assert check_fingerprints(here, dict(here)).matches
    with pytest.raises(ReportUsageError, match="--force"):
        check_fingerprints(here, there)
    forced = check_fingerprints(here, there, force=True)
    assert forced.forced and not forced.matches
    result = gate(*sides(1.0, seed=7), fingerprint=forced)
    assert any("FORCED" in note for note in result.notes)
    assert result.to_dict()["fingerprint"]["forced"] is True
    assert result.to_dict()["forced"][0].startswith("host fingerprint: baseline ('X'")


# --- runs in a store --------------------------------------------------------------------


def write_serving_run(store: RunStore, itl_s: float, seed: int, requests: int = 150) -> str:
    """An open-loop run: a request every 100 ms, 20 tokens at itl_s (lognormal jitter)."""
    rng = np.random.default_rng(seed)
    with store.create("serving") as run:
        for i in range(requests):
            send = i * S // 10
            first = send + int(rng.lognormal(np.log(0.05), 0.1) * S)
            gaps = (rng.lognormal(np.log(itl_s), 0.2, 19) * S).astype(int)
            chunks = [send + 1000, first, *(first + np.cumsum(gaps)).tolist()]
            run.append_request(
                RequestRecord(
                    request_id=f"r{i}",
                    scenario="rate=10",
                    phase="warmup" if i < 5 else "measure",
                    worker=0,
                    intended_send_ns=send,
                    send_ns=send,
                    done_ns=chunks[-1] + 1000,
                    status="error" if i % 50 == 7 else "ok",
                    chunk_ns=chunks,
                    chunk_tokens=[0] + [1] * 20,
                    first_token_ns=first,
                    last_token_ns=chunks[-1],
                    output_tokens=20,
                )
            )
    return run.run_id


def test_serving_samples_follow_the_metric_definitions(tmp_path):
    store = RunStore(tmp_path)
    run = load_run(store, write_serving_run(store, 0.01, seed=1))
    metrics = {m.key: m for m in run_samples(run)}
    assert list(metrics) == [
        "rate=10/ttft_s p50",
        "rate=10/ttft_s p99",
        "rate=10/tpot_s p50",
        "rate=10/tpot_s p99",
        "rate=10/itl_s p50",
        "rate=10/itl_s p99",
        "rate=10/e2e_s p50",
        "rate=10/request_output_tok_s mean",
        "rate=10/output_tok_s tokens/window",
    ]
    measured_ok = 145 - 3  # 5 warm-up requests excluded, 3 errors (i = 7, 57, 107)
    assert metrics["rate=10/ttft_s p50"].n == measured_ok
    assert metrics["rate=10/itl_s p99"].n == measured_ok * 19
    assert np.median(metrics["rate=10/itl_s p50"].values) == pytest.approx(0.01, rel=0.05)
    # Per request: 20 tokens over send -> done (about 50 ms + 19 x 10 ms).
    rate = metrics["rate=10/request_output_tok_s mean"]
    assert rate.direction == "higher" and rate.n == measured_ok and rate.kind == "required"
    assert rate.point == pytest.approx(20 / 0.24, rel=0.05)
    # The headline: ok output tokens / measured window (first send -> last done), every
    # measured request in the window and its count: 142 ok x 20 tokens.
    headline = metrics["rate=10/output_tok_s tokens/window"]
    measured = run.requests[run.requests["phase"] == "measure"]
    window_s = (measured["done_ns"].max() - measured["send_ns"].min()) / S
    assert headline.kind == "reported" and headline.n == 145
    assert headline.window_s == pytest.approx(window_s)
    assert headline.point == pytest.approx(measured_ok * 20 / window_s)


def test_one_output_tokens_per_second_in_summary_compare_and_gate(tmp_path):
    # Before: the gate and compare said the mean of 1 s bins (2995 tok/s where the summary
    # said 2707.6). Now all three say ok output tokens / measured window.
    store = RunStore(tmp_path)
    a_id, b_id = write_serving_run(store, 0.010, seed=1), write_serving_run(store, 0.011, seed=2)
    a, b = load_run(store, a_id), load_run(store, b_id)
    summary = summarize_requests(a.requests).scenarios["rate=10"].output_throughput_tok_s
    frame = compare_runs(a, b)
    row = frame.set_index(frame["metric"] + " " + frame["statistic"]).loc[
        "rate=10/output_tok_s tokens/window"
    ]
    verdict = next(v for v in gate(run_samples(b), run_samples(a)).verdicts if v.name.endswith(
        "/output_tok_s"))  # fmt: skip
    assert summary is not None
    assert row["a"] == pytest.approx(summary, rel=1e-12)
    assert verdict.baseline == pytest.approx(summary, rel=1e-12)
    assert verdict.outcome == "reported" and verdict.p_value is None
    assert np.isnan(row["p_value"])  # shown, not tested, in compare too


def test_gate_command_prints_and_writes_its_verdict(tmp_path):
    store = RunStore(tmp_path)
    baseline = load_run(store, write_serving_run(store, 0.010, seed=1))
    candidate_id = write_serving_run(store, 0.012, seed=2)
    lines: list[str] = []
    code = gate_command(candidate_id, baseline, tmp_path, out=lines.append)
    assert code == 1
    assert "REGRESSION rate=10/itl_s p50" in lines[0]
    body = json.loads((tmp_path / candidate_id / "gate.json").read_text())
    verdicts = {v["key"]: v for v in body["verdicts"]}
    assert verdicts["rate=10/itl_s p50"]["outcome"] == "regression"
    assert verdicts["rate=10/ttft_s p50"]["outcome"] == "no change"
    assert verdicts["rate=10/ttft_s p99"]["outcome"] == "inconclusive"  # 142 < 368 samples
    assert body["exit_code"] == 1 and body["baseline"] == baseline.run_id
    assert (tmp_path / candidate_id / "gate.txt").read_text().startswith("gate: ")


def test_gate_command_refuses_another_host_unless_forced(tmp_path):
    store = RunStore(tmp_path)
    baseline = load_run(store, write_serving_run(store, 0.010, seed=1))
    manifest = copy.deepcopy(baseline.manifest)
    manifest.host["cpu_model"] = "some other CPU"
    elsewhere = dataclasses.replace(baseline, manifest=manifest)
    candidate_id = write_serving_run(store, 0.010, seed=2)
    with pytest.raises(ReportUsageError, match="different hosts") as refused:
        gate_command(candidate_id, elsewhere, tmp_path, out=lambda _: None)
    # The exact command that records a baseline on this host (tox -e nightly shows it).
    promote = f"moeperf --runs-dir {tmp_path} baseline promote {candidate_id} --name "
    assert promote in str(refused.value)
    out_dir = tmp_path / "out"
    assert gate_command(candidate_id, elsewhere, tmp_path, out_dir, force=True, out=print) == 0
    body = json.loads((out_dir / "gate.json").read_text())
    assert body["fingerprint"]["forced"] is True and "FORCED" in body["notes"][0]


def test_micro_and_training_runs(tmp_path):
    store = RunStore(tmp_path)
    rng = np.random.default_rng(3)
    ids = {}
    for label, scale in (("a", 1.0), ("b", 1.3)):
        with store.create("micro") as run:
            for value in rng.normal(0.010 * scale, 0.0002, 30):
                run.append_sample(SampleRecord("moe_dispatch", float(value), "s", "lower"))
        ids[label] = run.run_id
    (micro,) = run_samples(load_run(store, ids["a"]))
    assert (micro.key, micro.metric_class, micro.n) == ("moe_dispatch median", "micro", 30)
    lines: list[str] = []
    assert gate_command(ids["b"], load_run(store, ids["a"]), tmp_path, out=lines.append)
    assert "REGRESSION moe_dispatch median" in lines[0]

    with store.create("training") as run:
        for step in range(20):
            for rank in range(2):
                start = step * S
                run.append_step(StepRecord(step, rank, start, start + S // 2 + rank, 4096, mfu=0.4))
    training = {m.key: m for m in run_samples(load_run(store, run.run_id))}
    assert set(training) == {"step_time_s median", "tokens_per_s mean", "mfu mean"}
    assert training["step_time_s median"].values[0] == pytest.approx(0.5, rel=1e-6)
    assert training["tokens_per_s mean"].values[0] == pytest.approx(8192 / 0.5, rel=1e-6)


def test_pooling_concatenates_each_metric():
    one = [latency("x", [1.0, 2.0]), latency("y", [5.0])]
    two = [latency("x", [3.0]), latency("z", [7.0])]
    pooled = {m.key: m.values.tolist() for m in pool_samples([one, two])}
    assert pooled == {"x p50": [1.0, 2.0, 3.0], "y p50": [5.0], "z p50": [7.0]}


def test_compare_runs_side_by_side(tmp_path):
    store = RunStore(tmp_path)
    a_id = write_serving_run(store, 0.010, seed=1)
    b_id = write_serving_run(store, 0.012, seed=2)
    frame = compare_runs(load_run(store, a_id), load_run(store, b_id))
    row = frame.set_index(frame["metric"] + " " + frame["statistic"]).loc["rate=10/itl_s p50"]
    assert row["ratio"] == pytest.approx(1.2, rel=0.05)
    assert row["ci_low"] < row["ratio"] < row["ci_high"] and row["p_value"] < 1e-6
    assert row["difference"] == pytest.approx(row["b"] - row["a"])
    assert np.isnan(frame.set_index("statistic").loc["p99"]["p_value"]).any()  # ttft: few
    lines: list[str] = []
    assert compare_command(a_id, b_id, tmp_path, out=lines.append) == 0
    assert "rate=10/itl_s p50" in lines[0]
