"""Where report pages go, and that they never replace a file unless asked (issue 11, item 8).

Through ``moeperf.cli.main`` in-process, so the exit codes and messages are the CLI's own.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from moeperf.cli import main
from moeperf.collectors.records import RequestRecord
from moeperf.collectors.serving_records import ServingSummary
from moeperf.collectors.store import RunStore
from moeperf.collectors.summary import summarize_requests
from moeperf.collectors.sweep_records import SweepPointSummary, SweepSummary
from moeperf.collectors.tables import records_frame
from moeperf.reports.appendix import CHART_KINDS, DEFINED_FOR, DEFINITIONS, appendix_html
from moeperf.reports.baselines import BaselineStore
from moeperf.reports.page_path import MAX_NAMED_RUNS, several_runs_name
from moeperf.reports.render import Chart, Section
from moeperf.reports.report import build_report
from moeperf.reports.runs import load_run

MS = 1_000_000


def make_run(store: RunStore, *, errors: int = 0, levels: int = 1) -> str:
    """A complete serving run of 12 ok requests (and ``errors`` failed ones); with
    ``levels=2`` the last 6 ok requests (and the failed ones) are a second level, c=4."""
    run = store.create("serving", spec_given={"name": "pages"})
    records = []
    for i in range(12 + errors):
        t0 = i * 100 * MS
        ok = i < 12
        chunks = [t0 + 20 * MS + k * 10 * MS for k in range(4)] if ok else []
        record = RequestRecord(
            request_id=f"r{i}", scenario="c=2" if levels == 1 or i < 6 else "c=4",
            phase="measure", worker=0,
            intended_send_ns=t0, send_ns=t0, done_ns=t0 + 60 * MS,
            status="ok" if ok else "error", error_type=None if ok else "http_5xx",
            http_status=None if ok else 500, chunk_ns=chunks, chunk_tokens=[1] * len(chunks),
            first_token_ns=chunks[0] if ok else None, last_token_ns=chunks[-1] if ok else None,
            output_tokens=4 if ok else None,
        )  # fmt: skip
        records.append(record)
        run.append_request(record)
    run.write_summary(summarize_requests(records_frame(records)))
    run.complete()
    return run.run_id


@pytest.fixture
def runs(tmp_path: Path) -> RunStore:
    return RunStore(tmp_path / "runs")


def cli(runs: RunStore, *args: str) -> int:
    return main(["--runs-dir", str(runs.root), *args])


def test_a_second_report_of_a_run_is_refused_then_forced(runs, capsys):
    run_id = make_run(runs)
    page = runs.root / run_id / "report.html"
    assert cli(runs, "report", run_id) == 0
    assert capsys.readouterr().out.strip() == str(page)
    page.write_text("the page a user kept", encoding="utf-8")
    # Exit 2, naming the file and the flag; the file is untouched.
    assert cli(runs, "report", run_id) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert str(page) in err and "--force" in err and "--out" in err
    assert page.read_text(encoding="utf-8") == "the page a user kept"
    assert cli(runs, "report", run_id, "--force") == 0
    assert page.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def test_an_explicit_out_is_permission_to_replace_that_file(runs, tmp_path):
    # tox -e nightly writes --out runs/nightly-report.html every night: re-runs must work.
    first, second = make_run(runs), make_run(runs)
    out = tmp_path / "nightly-report.html"
    assert cli(runs, "report", first, "--out", str(out)) == 0
    assert first in out.read_text(encoding="utf-8")
    assert cli(runs, "report", "latest", "--out", str(out)) == 0
    page = out.read_text(encoding="utf-8")
    assert second in page and first not in page


def test_a_report_of_two_runs_gets_its_own_name_in_the_runs_directory(runs, capsys):
    a, b = make_run(runs), make_run(runs)
    assert cli(runs, "report", a) == 0
    single = runs.root / a / "report.html"
    kept = single.read_bytes()
    capsys.readouterr()
    assert cli(runs, "report", a, b) == 0
    both = runs.root / f"report-{a}-vs-{b}.html"
    assert capsys.readouterr().out.strip() == str(both)
    assert single.read_bytes() == kept  # the first run's own report is not replaced
    assert a in both.read_text(encoding="utf-8") and b in both.read_text(encoding="utf-8")
    assert cli(runs, "report", a, b) == 2  # and that name is not replaced either


def test_many_runs_get_a_short_name():
    ids = [f"20260101-000000-00000{i}-serving-abc12{i}" for i in range(MAX_NAMED_RUNS + 2)]
    name = several_runs_name(ids)
    assert name.startswith(f"report-{ids[0]}-and-{len(ids) - 1}-more-") and len(name) < 120
    assert name != several_runs_name(list(reversed(ids)))


def test_the_baseline_report_goes_under_the_runs_directory(runs, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the old default wrote into the current directory
    baselines = BaselineStore(tmp_path / "baselines")
    baselines.promote(runs.root / make_run(runs), "demo")
    args = ("--baselines-dir", str(baselines.root))
    assert cli(runs, "baseline", "report", "demo", *args) == 0
    page = runs.root / "baseline-demo-v1-report.html"
    assert page.exists() and not list(tmp_path.glob("*.html"))
    assert cli(runs, "baseline", "report", "demo@1", *args) == 2  # exists: refused
    assert cli(runs, "baseline", "report", "demo@1", "--force", *args) == 0
    # A new version is a new page, not a refusal.
    baselines.promote(runs.root / make_run(runs), "demo")
    assert cli(runs, "baseline", "report", "demo", *args) == 0
    assert (runs.root / "baseline-demo-v2-report.html").exists()


def explained(page: str) -> set[str]:
    return set(re.findall(r"<h4><code>reports\.figures\.(\w+)</code></h4>", page))


def test_the_appendix_explains_only_the_chart_kinds_on_the_page(runs):
    clean = build_report([load_run(runs, make_run(runs))], "clean")
    # A serving run of one level without errors: no curve (one level is a point, not a
    # trade-off), no error chart, and no training, micro, forest or baseline-trend chart,
    # so none of them is explained.
    assert explained(clean) == {"percentiles", "cdf", "timeline", "prefill"}
    failing = build_report([load_run(runs, make_run(runs, errors=2))], "with errors")
    assert explained(failing) == explained(clean) | {"errors"}
    # Two load levels are a trade-off: the curve and the interactivity chart.
    swept = build_report([load_run(runs, make_run(runs, levels=2))], "two levels")
    assert explained(swept) == explained(clean) | {"concurrency", "interactivity"}
    assert "Ringed points are the operating points worth choosing" in swept
    assert "How the charts are drawn" not in appendix_html([Section("empty", "empty")])


def defined(page: str) -> set[str]:
    return set(re.findall(r"<h4><code>(collectors\.[\w.]+)</code></h4>", page))


def test_the_appendix_defines_only_what_the_page_shows(runs):
    # Issue 40: more than half of a default run's page was definitions of the cluster
    # simulator, drills, soaks and accelerator maths the run did not use.
    clean = build_report([load_run(runs, make_run(runs))], "clean")
    assert {"collectors.latency", "collectors.summary", "collectors.quantiles"} <= defined(clean)
    unused = {"collectors.simulation_summary", "collectors.drill_records",
              "collectors.soak_records", "collectors.soak_verdicts",
              "collectors.mtp_ab_records", "collectors.accel_figures"}  # fmt: skip
    assert not defined(clean) & unused, defined(clean) & unused
    # A page without a chart (nothing to tell what it shows) quotes them all.
    everything = appendix_html([Section("empty", "empty")])
    assert unused <= defined(everything)


def test_every_definition_names_chart_kinds_that_exist():
    assert set(DEFINED_FOR) == set(DEFINITIONS)
    assert all(kind in CHART_KINDS for kinds in DEFINED_FOR.values() for kind in kinds)


def test_a_sweep_over_prompt_lengths_gets_its_table_and_chart(runs):
    run = load_run(runs, make_run(runs))
    assert isinstance(run.summary, ServingSummary)
    # The run's one level as the only sent length of a sweep; 64 tokens did not fit.
    scenarios = {
        name: dataclasses.replace(entry, input_tokens=16)
        for name, entry in run.summary.scenarios.items()
    }
    too_long = SweepPointSummary(64, not_available="not available from this target: too long")
    sent = SweepPointSummary(16, ("c=2",))
    sweep = SweepSummary(32, "spec: sweep.input_tokens.context_tokens", 4, (sent, too_long))
    summary = dataclasses.replace(run.summary, scenarios=scenarios, sweep=sweep)
    page = build_report([dataclasses.replace(run, summary=summary)], "sweep")
    assert "sweep" in explained(page)
    assert "Sweep over prompt lengths (context limit 32 tokens (spec: " in page
    assert "not available from this target: too long" in page
    assert "<code>collectors.prefill</code>" in page


def test_a_chart_kind_the_appendix_does_not_know_is_an_error():
    import plotly.graph_objects as go

    section = Section("s", "s", blocks=[Chart(go.Figure(), drawn_by=("cdff",))])
    with pytest.raises(ValueError, match="cdff"):
        appendix_html([section])
    assert "cdf" in CHART_KINDS
