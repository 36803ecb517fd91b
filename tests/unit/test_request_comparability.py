"""compare and the gate refuse runs whose requests asked different things of the target
(sampling, usage options, ...), unless forced; runs stored before the settings were
recorded are judged by what their spec says they sent."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
from run_factory import lognormal_requests, store_run

from moeperf.cli import main
from moeperf.collectors.request_settings import RequestSettings, Sampling, legacy_request_settings
from moeperf.collectors.store import RunReader, RunStore
from moeperf.reports.comparability import check_specs, request_differences
from moeperf.reports.compare import compare_command
from moeperf.reports.errors import SpecMismatchError
from moeperf.reports.gate_output import gate_command
from moeperf.reports.runs import load_run
from moeperf.specs import load_spec

S = 1_000_000_000
BASELINE_V2 = Path(__file__).resolve().parents[2] / "reports/baselines/nightly/v2"
# The nightly spec as the committed baseline v2 ran it: three levels, no ramp.
AS_V2 = ["load.levels=[1, 8, 32]", "load.ramp_s=0"]
NIGHTLY = load_spec("nightly", AS_V2).spec.model_dump(mode="json")
GREEDY_NIGHTLY = legacy_request_settings(NIGHTLY)


def write_run(
    store: RunStore, settings: RequestSettings | None, seed: int, spec: dict = NIGHTLY
) -> str:
    """A run of level c=1: 120 measured requests of 20 tokens at 10 ms."""
    requests = lognormal_requests(120, seed=seed)
    target = {"kind": "synthetic", "model": "synthetic"}
    run = store_run(store, requests, spec_resolved=spec, target=target, settings=settings)
    return run.run_id


def sampled(**fields: object) -> RequestSettings:
    return dataclasses.replace(GREEDY_NIGHTLY, sampling=Sampling(**fields))  # type: ignore[arg-type]


def test_the_gate_refuses_another_temperature_and_gates_it_forced(tmp_path):
    store = RunStore(tmp_path)
    base = load_run(store, write_run(store, GREEDY_NIGHTLY, seed=1))
    candidate_id = write_run(store, sampled(temperature=0.7), seed=2)
    with pytest.raises(SpecMismatchError) as refused:
        gate_command(candidate_id, base, tmp_path, out=lambda _: None)
    message = str(refused.value)
    assert "request.sampling.temperature: baseline 0.0, candidate 0.7" in message
    assert "1 field(s) differ" in message and "--force" in message
    lines: list[str] = []
    out_dir = tmp_path / "gate"
    assert gate_command(candidate_id, base, tmp_path, out_dir, force=True, out=lines.append) == 0
    assert "forced: spec request.sampling.temperature: baseline 0.0, candidate 0.7" in lines[0]
    body = json.loads((out_dir / "gate.json").read_text())
    assert [d["field"] for d in body["spec_check"]["differences"]] == [
        "request.sampling.temperature"
    ]


def test_a_field_not_sent_is_named_as_the_server_default(tmp_path):
    store = RunStore(tmp_path)
    greedy = store.open(write_run(store, GREEDY_NIGHTLY, seed=1)).manifest
    default = store.open(write_run(store, sampled(temperature=None, seed=3), seed=2)).manifest
    (temperature, seed) = check_specs(greedy, default, force=True).differences
    assert temperature.describe() == (
        "request.sampling.temperature: baseline 0.0, candidate null (not sent: the server's "
        "default)"
    )
    assert seed.describe().startswith("request.sampling.seed: baseline null (not sent")


def test_every_request_setting_is_compared(tmp_path):
    store = RunStore(tmp_path)
    a = store.open(write_run(store, GREEDY_NIGHTLY, seed=1)).manifest
    other = dataclasses.replace(
        GREEDY_NIGHTLY, api="completions", include_usage=False, continuous_usage=False,
        ignore_eos=False, min_tokens=2, max_tokens_field="max_completion_tokens",
        extra_body={"min_p": 0.1}, scrape_interval_s=None,
        sampling=Sampling(0.0, 0.9, 40, 1),
    )  # fmt: skip
    b = store.open(write_run(store, other, seed=2)).manifest
    fields = [d.field for d in request_differences(a, b)]
    assert fields == [
        "request.api", "request.sampling.top_p", "request.sampling.top_k",
        "request.sampling.seed", "request.include_usage", "request.continuous_usage",
        "request.ignore_eos", "request.min_tokens", "request.max_tokens_field",
        "request.extra_body", "request.scrape_interval_s",
    ]  # fmt: skip
    assert request_differences(a, a) == []


def test_compare_refuses_differing_requests_unless_forced(tmp_path, capsys):
    store = RunStore(tmp_path)
    a_id = write_run(store, GREEDY_NIGHTLY, seed=1)
    b_id = write_run(store, sampled(temperature=0.7, top_p=0.9), seed=2)
    with pytest.raises(SpecMismatchError) as refused:
        compare_command(a_id, b_id, tmp_path, out=lambda _: None)
    message = str(refused.value)
    assert "request.sampling.temperature: baseline 0.0, candidate 0.7" in message
    assert "request.sampling.top_p: baseline null (not sent: the server's default), " in message
    assert "pass --force to compare anyway" in message
    # The CLI: exit 2 with the message, and --force compares, listing what it forced.
    assert main(["--runs-dir", str(tmp_path), "compare", a_id, b_id]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "request.sampling.temperature: baseline 0.0, candidate 0.7" in err
    assert main(["--runs-dir", str(tmp_path), "compare", a_id, b_id, "--force"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "forced: the requests differ: request.sampling.temperature: baseline 0.0" in out
    assert "c=1/itl_s p50" in out


def test_compare_still_only_notes_other_spec_differences(tmp_path):
    store = RunStore(tmp_path)
    a_id = write_run(store, GREEDY_NIGHTLY, seed=1)
    fewer = {**NIGHTLY, "load": {**NIGHTLY["load"], "levels": [1.0, 8.0]}}
    b_id = write_run(store, GREEDY_NIGHTLY, seed=2, spec=fewer)
    lines: list[str] = []
    assert compare_command(a_id, b_id, tmp_path, out=lines.append) == 0
    assert (
        "note: the specs differ: load.levels: baseline [1.0, 8.0, 32.0], candidate [1.0, 8.0] "
        "(baseline = A, candidate = B)"
    ) in lines
    assert not any(line.startswith("forced:") for line in lines)


def test_a_new_greedy_run_gates_against_the_committed_baseline(tmp_path):
    # Baseline v2 was stored before request settings were recorded: derived from its spec,
    # they equal what a new run of the nightly spec records, so nothing is refused for them.
    runs = tmp_path / "runs"
    shutil.copytree(BASELINE_V2, runs / "v2")
    baseline = RunReader(runs / "v2").manifest
    assert baseline.request_settings is None
    store = RunStore(runs)
    new = store.open(write_run(store, GREEDY_NIGHTLY, seed=1)).manifest
    assert request_differences(baseline, new) == []
    assert check_specs(baseline, new).differences == ()  # the gate's whole spec check
    hot = store.open(write_run(store, sampled(temperature=1.0), seed=2)).manifest
    (difference,) = request_differences(baseline, hot)
    assert difference.describe() == "request.sampling.temperature: baseline 0.0, candidate 1.0"


def test_workload_fields_added_later_read_as_what_older_runs_did(tmp_path):
    # The committed baseline predates prefixes, conversations, traces, repeats and
    # workload.cache: it ran none of the first four, and its cache mode is not compared.
    runs = tmp_path / "runs"
    shutil.copytree(BASELINE_V2, runs / "v2")
    baseline = RunReader(runs / "v2").manifest
    assert "cache" not in baseline.spec_resolved["workload"]
    store = RunStore(runs)
    repeated = {**NIGHTLY, "load": {**NIGHTLY["load"], "repeats": 2}}
    new = store.open(write_run(store, GREEDY_NIGHTLY, seed=1, spec=repeated)).manifest
    (difference,) = check_specs(baseline, new, force=True).differences
    assert difference.describe() == "load.repeats: baseline 1, candidate 2"
    # Between two new runs the cache mode is compared like any field.
    reuse = {**NIGHTLY, "workload": {**NIGHTLY["workload"], "cache": "reuse"}}
    fresh = store.open(write_run(store, GREEDY_NIGHTLY, seed=2)).manifest
    warm = store.open(write_run(store, GREEDY_NIGHTLY, seed=3, spec=reuse)).manifest
    (cache,) = check_specs(fresh, warm, force=True).differences
    assert cache.field == "workload.cache"
    with pytest.raises(SpecMismatchError, match=r"workload\.cache"):
        check_specs(fresh, warm)
