"""The gate refuses what it cannot compare: another spec (exit 2, each field named, --force
recorded), and reads its minimum effects from the candidate's spec ([gate] table)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from run_factory import lognormal_requests, store_run

from moeperf.cli import main
from moeperf.collectors.records import RequestRecord
from moeperf.collectors.serving_records import ServingSummary
from moeperf.collectors.store import RunReader, RunStore
from moeperf.reports.baselines import BaselineStore
from moeperf.reports.errors import ReportUsageError, SpecMismatchError
from moeperf.reports.gate_output import gate_command, judge_runs, parse_min_effects
from moeperf.reports.runs import load_run
from moeperf.reports.samples import run_samples
from moeperf.specs import load_spec, validate_spec
from moeperf.suites.errors import SpecError

S = 1_000_000_000


def resolved(spec: str, *overrides: str) -> dict:
    """A shipped spec as a run's manifest stores it (spec_resolved)."""
    return load_spec(spec, overrides).spec.model_dump(mode="json")


def write_run(store: RunStore, spec_resolved: dict, itl_s: float = 0.01, seed: int = 1) -> str:
    """A closed-loop-like run of level c=1: 120 measured requests, 20 tokens at itl_s."""
    requests = lognormal_requests(120, seed=seed, itl_s=itl_s)
    target = {"kind": "synthetic", "model": "synthetic"}
    return store_run(store, requests, spec_resolved=spec_resolved, target=target).run_id


def test_a_run_of_another_spec_is_refused_naming_each_field(tmp_path, capsys):
    # The case: a run of the synthetic spec gated against a nightly baseline was
    # compared without a word (and, forced, passed with 40 of 48 metrics missing).
    runs = tmp_path / "runs"
    store = RunStore(runs)
    baseline_id = write_run(store, resolved("nightly"))
    candidate_id = write_run(store, resolved("synthetic"), seed=2)
    BaselineStore(tmp_path / "baselines").promote(runs / baseline_id, "nightly")
    argv = ["--runs-dir", str(runs), "gate", candidate_id, "--baseline", "nightly"]
    code = main([*argv, "--baselines-dir", str(tmp_path / "baselines")])
    err = " ".join(capsys.readouterr().err.split())  # the terminal wraps long lines
    assert code == 2
    assert "ran different specs and are not comparable" in err
    assert "load.levels: baseline [1.0, 8.0, 32.0, 64.0], candidate [1.0, 4.0, 16.0, 64.0]" in err
    assert "workload.output_tokens: baseline" in err and '"dist": "fixed"' in err
    assert "slo: baseline" in err
    # The advice names a baseline of the candidate's own spec: following it cannot make the
    # nightly baseline a synthetic one (it once advised --name nightly, which did).
    advice = f"moeperf --runs-dir {runs} baseline promote {candidate_id} --name synthetic"
    assert advice in err
    assert "target.kind" not in err  # both synthetic: only what differs is named
    assert not (runs / candidate_id / "gate.json").exists()
    assert main([*advice.split()[1:], "--baselines-dir", str(tmp_path / "baselines")]) == 0
    assert BaselineStore(tmp_path / "baselines").versions("nightly") == [1]
    assert BaselineStore(tmp_path / "baselines").versions("synthetic") == [1]


def test_another_target_kind_is_refused(tmp_path):
    # The other case: the reference engine's run against a baseline of synthetic runs.
    store = RunStore(tmp_path)
    base = load_run(store, write_run(store, resolved("nightly")))
    other = resolved("nightly")
    other["target"]["kind"] = "reference"
    candidate_id = write_run(store, other, seed=2)
    with pytest.raises(SpecMismatchError) as error:
        gate_command(candidate_id, base, tmp_path, out=lambda _: None)
    assert 'target.kind: baseline "synthetic", candidate "reference"' in str(error.value)


def test_force_gates_anyway_and_says_what_it_overrode(tmp_path):
    store = RunStore(tmp_path)
    base = load_run(store, write_run(store, resolved("nightly")))
    candidate_id = write_run(store, resolved("nightly", "load.levels=[1, 8]"), seed=2)
    lines: list[str] = []
    out_dir = tmp_path / "gate"
    code = gate_command(candidate_id, base, tmp_path, out_dir, force=True, out=lines.append)
    text = lines[0]
    assert "forced: spec load.levels: baseline [1.0, 8.0, 32.0, 64.0], candidate [1.0, 8.0]" in text
    assert "(FORCED: see 'forced' above)" in text.splitlines()[-1]
    body = json.loads((out_dir / "gate.json").read_text())
    assert body["spec_check"]["forced"] is True
    assert [d["field"] for d in body["spec_check"]["differences"]] == ["load.levels"]
    assert body["forced"] == [
        "spec load.levels: baseline [1.0, 8.0, 32.0, 64.0], candidate [1.0, 8.0]"
    ]
    assert code == 0  # same samples otherwise: a pass, labelled forced


def test_durations_and_seeds_may_differ(tmp_path):
    store = RunStore(tmp_path)
    base = load_run(store, write_run(store, resolved("nightly")))
    longer = resolved("nightly", "load.duration_s=30", "load.seed=3", "workload.seed=4")
    candidate_id = write_run(store, longer, seed=2)
    assert gate_command(candidate_id, base, tmp_path, out=lambda _: None) == 0


def test_the_gate_table_validates_its_keys():
    spec = load_spec("nightly", ["gate.min_effects={latency_p99 = 0.3, throughput = 0.1}"])
    assert spec.serving.gate.min_effects == {"latency_p99": 0.3, "throughput": 0.1}
    # A metric by its statistic, at every level.
    spec = load_spec("nightly", ["gate.min_effects={ttft_s_p99 = 0.1}"])
    assert spec.serving.gate.min_effects == {"ttft_s_p99": 0.1}
    with pytest.raises(SpecError) as error:
        validate_spec({"name": "x", "gate": {"min_effects": {"ttft": 0.1}}}, "x.toml")
    message = str(error.value)
    assert "gate.min_effects: unknown key(s) 'ttft'" in message
    assert "valid keys: latency, latency_p50, latency_p99, throughput, micro, training, " in message
    assert "ttft_s_p99" in message
    with pytest.raises(SpecError, match="less than 1"):
        validate_spec({"name": "x", "gate": {"min_effects": {"latency": 1.5}}}, "x.toml")


def test_an_unknown_gate_key_exits_2_before_any_load(capsys):
    assert main(["run", "nightly", "--set", "gate.min_effects.bogus=0.1"]) == 2
    assert "valid keys: latency, latency_p50" in capsys.readouterr().err


def test_the_gate_reads_minimum_effects_from_the_candidates_spec_and_flags_win(tmp_path):
    store = RunStore(tmp_path)
    base = load_run(store, write_run(store, resolved("nightly"), itl_s=0.010))
    # ITL 20% slower: a regression at the default 5%...
    plain = write_run(store, resolved("nightly"), itl_s=0.012, seed=2)
    assert gate_command(plain, base, tmp_path, out=lambda _: None) == 1
    # ...not at the 30% the candidate's spec sets (a class key covers its p99 too).
    loose = resolved("nightly", "gate.min_effects={latency = 0.3, throughput = 0.3}")
    candidate_id = write_run(store, loose, itl_s=0.012, seed=2)
    lines: list[str] = []
    assert gate_command(candidate_id, base, tmp_path, out=lines.append) == 0
    body = json.loads((tmp_path / candidate_id / "gate.json").read_text())
    verdicts = {v["key"]: v for v in body["verdicts"]}
    assert verdicts["c=1/itl_s p50"]["min_effect"] == 0.3
    assert verdicts["c=1/itl_s p50"]["outcome"] == "significant, below minimum effect"
    assert body["min_effects"] == {"latency": 0.3, "throughput": 0.3}
    assert "minimum effects set for this gate: latency=0.3, throughput=0.3" in lines[0]
    # The command line's flag wins over the spec.
    flags = parse_min_effects(["latency=0.05"])
    assert gate_command(candidate_id, base, tmp_path, out=lambda _: None, min_effects=flags) == 1


def test_min_effect_flags_are_validated():
    assert parse_min_effects(["latency_p99=0.25", "throughput=0"]) == {
        "latency_p99": 0.25,
        "throughput": 0.0,
    }
    assert parse_min_effects(["ttft_s_p99=0.08"]) == {"ttft_s_p99": 0.08}
    with pytest.raises(ReportUsageError, match="KEY one of latency, latency_p50"):
        parse_min_effects(["ttft=0.1"])
    with pytest.raises(ReportUsageError, match=r"in \[0, 1\)"):
        parse_min_effects(["latency=5"])


def batched_requests(n: int, seed: int) -> list[RequestRecord]:
    """A client-bound level's records: the event loop read each response's chunks in
    bursts, so most chunks share one timestamp and most ITL gaps are 0."""
    records = lognormal_requests(n, seed=seed)
    for r in records:
        first = r.chunk_ns[0]
        r.chunk_ns = [first + (i // 10) * 100_000_000 for i in range(len(r.chunk_ns))]
        r.last_token_ns = r.chunk_ns[-1]
    return records


def test_an_invalid_level_is_not_judged(tmp_path):
    # The case: the gate on an invalid run reported "ITL p50 10 ms -> 0 ms" as an
    # improvement. The zeros were the client's (bursts read at once), and the level said
    # so (invalid): its metrics are not judged, and the run cannot pass on them.
    store = RunStore(tmp_path)
    spec = resolved("nightly")
    base = store_run(store, lognormal_requests(400, seed=1), spec_resolved=spec,
                     summary="computed")  # fmt: skip
    cand = store_run(store, batched_requests(400, seed=2), spec_resolved=spec,
                     summary="computed", end=None)  # fmt: skip
    summary = RunReader(cand.directory).summary()
    assert isinstance(summary, ServingSummary)
    level = dataclasses.replace(
        summary.scenarios["c=1"], status="invalid",
        status_reason="client was the bottleneck: worker 0: event-loop lag p99 6.1 ms",
    )  # fmt: skip
    cand.write_summary(dataclasses.replace(summary, scenarios={"c=1": level}))
    cand.invalidate("levels invalid: c=1 (client was the bottleneck)")
    baseline, candidate = load_run(store, base.run_id), load_run(store, cand.run_id)
    itl = {m.key: m for m in run_samples(candidate)}["c=1/itl_s p50"]
    assert itl.point == 0.0  # what the old gate called an improvement

    result = judge_runs(candidate, baseline, baseline_label="nightly@1")
    verdicts = {v.key: v for v in result.verdicts}
    judged = [v for v in verdicts.values() if v.level == "c=1" and v.outcome != "reported"]
    assert judged and all(v.outcome == "inconclusive" for v in judged), judged
    assert verdicts["c=1/itl_s p50"].reason.startswith(
        "not judged: level invalid in the candidate (client was the bottleneck"
    )
    assert result.exit_code == 1  # nothing judged: inconclusive, never a pass
