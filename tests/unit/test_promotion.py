"""What `baseline promote` refuses without --force (reports/promotion.py): a level that is
not ok, a failed gate verdict stored with the run. Run status refusals are in
test_baselines.py."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from run_factory import End, store_run

from moeperf.collectors.records import RequestRecord
from moeperf.collectors.serving_records import ServingSummary
from moeperf.collectors.store import RunReader, RunWriter
from moeperf.reports.baseline_commands import promote_command, show_command
from moeperf.reports.baselines import BaselineStore
from moeperf.reports.errors import ReportUsageError

MS = 1_000_000


def request(i: int, scenario: str) -> RequestRecord:
    start = i * 50 * MS
    chunks = [start + 20 * MS, start + 25 * MS]
    return RequestRecord(
        request_id=f"{scenario}-{i}",
        scenario=scenario,
        phase="measure",
        worker=0,
        intended_send_ns=start,
        send_ns=start,
        done_ns=start + 30 * MS,
        status="ok",
        chunk_ns=chunks,
        chunk_tokens=[1, 1],
        chunk_tokens_source="usage_stats",
        first_token_ns=chunks[0],
        last_token_ns=chunks[-1],
        output_tokens=2,
    )


def write_run(runs: Path, end: End = "complete") -> RunWriter:
    """A small real serving run: two levels of ok requests, stored and summarized."""
    records = [request(i, scenario) for scenario in ("c=1", "c=4") for i in range(10)]
    return store_run(runs, records, summary="computed", end=end)


@pytest.fixture
def store(tmp_path: Path) -> BaselineStore:
    return BaselineStore(tmp_path / "baselines")


def test_a_level_that_is_not_ok_needs_force(store, tmp_path):
    # A run whose summary has a failed level, whatever its manifest says.
    run = write_run(tmp_path / "runs", end=None)
    summary = RunReader(run.directory).summary()
    assert isinstance(summary, ServingSummary)
    entry = dataclasses.replace(
        summary.scenarios["c=4"], status="failed", status_reason="http_5xx 9: 9 of 10 failed"
    )
    run.write_summary(dataclasses.replace(summary, scenarios={**summary.scenarios, "c=4": entry}))
    run.complete()
    with pytest.raises(ReportUsageError, match=r"level c=4 is failed \(http_5xx 9.*--force"):
        store.promote(run.directory, "b")
    assert store.promote(run.directory, "b", force=True).version == 1


def write_gate_json(run: RunWriter, exit_code: int) -> None:
    """gate.json as reports/gate_output.py write_gate leaves it in the candidate's directory."""
    verdicts = [
        {"key": "itl_s p50 @c=4", "outcome": "regression" if exit_code else "no change"},
        {"key": "ttft_s p50 @c=4", "outcome": "no change"},
        {
            "key": "e2e_s p99 @c=4",
            "outcome": "missing from candidate" if exit_code else "no change",
        },
    ]
    body = {
        "baseline": "nightly@3",
        "candidate": run.run_id,
        "status": "fail" if exit_code else "pass",
        "exit_code": exit_code,
    }
    (run.directory / "gate.json").write_text(json.dumps({**body, "verdicts": verdicts}))


def test_a_run_that_failed_the_gate_needs_force(store, tmp_path):
    run = write_run(tmp_path / "runs")
    write_gate_json(run, exit_code=1)
    runs, root = str(tmp_path / "runs"), str(store.root)
    with pytest.raises(ReportUsageError) as refused:
        promote_command(run.run_id, "b", None, runs, root, False)
    message = str(refused.value)
    assert "failed the gate against nightly@3 (gate.json: exit 1; fail; " in message
    assert "itl_s p50 @c=4 regression, e2e_s p99 @c=4 missing from candidate" in message
    assert "ttft_s" not in message
    assert "--force" in message
    assert store.versions("b") == []
    out: list[str] = []
    assert promote_command(run.run_id, "b", None, runs, root, True, out.append) == 0
    assert store.versions("b") == [1]
    assert any("--force although it failed the gate" in line for line in out)


def test_an_inconclusive_gate_verdict_needs_force(store, tmp_path):
    run = write_run(tmp_path / "runs")
    body = {"baseline": "nightly@3", "status": "inconclusive", "exit_code": 1, "verdicts": []}
    body["coverage_problem"] = "only 8 of 48 metrics judged (17% < 90%)"
    (run.directory / "gate.json").write_text(json.dumps(body))
    with pytest.raises(ReportUsageError, match=r"inconclusive; only 8 of 48 metrics judged"):
        store.promote(run.directory, "b")


def test_a_run_that_passed_the_gate_is_promoted(store, tmp_path):
    run = write_run(tmp_path / "runs")
    write_gate_json(run, exit_code=0)
    assert store.promote(run.directory, "b").version == 1


def test_an_unreadable_gate_verdict_needs_force(store, tmp_path):
    run = write_run(tmp_path / "runs")
    (run.directory / "gate.json").write_text("{not json")
    with pytest.raises(ReportUsageError, match=r"gate verdict .* cannot be read"):
        store.promote(run.directory, "b")


def spec_run(runs: Path, name: str, levels: list[int]) -> RunWriter:
    """A complete run of a serving spec named ``name`` sweeping ``levels``."""
    records = [request(i, "c=1") for i in range(10)]
    spec = {"suite": "serving", "name": name, "load": {"levels": levels}}
    return store_run(runs, records, spec_given=spec, spec_resolved=spec, summary="computed")


def test_a_new_version_of_another_spec_is_refused_and_forcing_it_is_recorded(store, tmp_path):
    runs = tmp_path / "runs"
    assert store.promote(spec_run(runs, "nightly", [1, 8, 32]).directory, "nightly").version == 1
    # The gate once advised promoting an MTP A/B run as "nightly": every later nightly run
    # was then refused as "not comparable". Now the promotion itself is refused, exit 2.
    other = spec_run(runs, "mtp-ab", [4])
    with pytest.raises(ReportUsageError) as refused:
        store.promote(other.directory, "nightly")
    message = str(refused.value)
    assert "ran a different spec from baseline nightly@1" in message
    assert "load.levels: baseline [1, 8, 32], candidate [4]" in message
    assert "--name mtp-ab" in message and "--force" in message
    assert store.versions("nightly") == [1]  # nothing written
    # Under its own name it is a baseline of its own; the same spec is a new version.
    assert store.promote(other.directory, "mtp-ab").ref == "mtp-ab@1"
    again = store.promote(spec_run(runs, "nightly", [1, 8, 32]).directory, "nightly")
    assert (again.ref, again.forced) == ("nightly@2", ())
    # Forced, the version says what was overridden, in baseline.json and in `show`.
    forced = store.promote(other.directory, "nightly", force=True)
    assert forced.forced == (
        "its spec differs from nightly@2: load.levels: baseline [1, 8, 32], candidate [4]",
    )
    assert store.get("nightly", 3).forced == forced.forced
    shown: list[str] = []
    show_command("nightly@3", str(store.root), out=shown.append)
    assert "  forced        although its spec differs from nightly@2: load.levels" in (
        "\n".join(shown)
    )
