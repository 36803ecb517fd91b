"""The HTML page: self-contained, plotly.js once, every user string escaped, never markup."""

from __future__ import annotations

import html
import inspect
import re
from html.parser import HTMLParser
from typing import Any

import pandas as pd
import pytest
from plotly.offline import get_plotlyjs

import moeperf.collectors.latency
import moeperf.collectors.quantiles
import moeperf.collectors.summary
from moeperf.collectors.manifest import RunManifest
from moeperf.collectors.records import RequestRecord, SampleRecord, StepRecord
from moeperf.collectors.store import RunStore
from moeperf.collectors.tables import SCHEMAS, records_frame, rows_to_table, table_to_frame
from moeperf.reports.appendix import appendix_html
from moeperf.reports.errors import ReportUsageError
from moeperf.reports.render import CSP
from moeperf.reports.report import build_report, report_command
from moeperf.reports.runs import RunData

MS = 1_000_000
XSS_SCRIPT = "<script>alert(1)</script>"
XSS_ATTR = '"><img src=x onerror=alert(1)>'
XSS = XSS_SCRIPT + XSS_ATTR
TARGET_URL = "http://127.0.0.1:9/v1?q=" + XSS
ALLOWED_TAGS = {
    "html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "h4", "p", "nav",
    "ul", "li", "a", "section", "dl", "dt", "dd", "details", "summary", "pre", "div",
    "table", "thead", "tbody", "tr", "th", "td", "script", "strong", "code",
}  # fmt: skip


class Tags(HTMLParser):
    """Every start tag with its attributes, parsed the way a browser tokenizes."""

    def __init__(self, page: str):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def request(i: int, scenario: str, **overrides: Any) -> RequestRecord:
    t0 = i * 100 * MS
    base: dict[str, Any] = dict(
        request_id=f"r{i}",
        scenario=scenario,
        phase="measure",
        worker=0,
        intended_send_ns=t0,
        send_ns=t0 + MS,
        done_ns=t0 + 90 * MS,
        status="ok",
        chunk_ns=[t0 + 5 * MS, t0 + 50 * MS, t0 + 60 * MS, t0 + 80 * MS],
        chunk_tokens=[0, 1, 2, 1],
        chunk_tokens_source="usage_stats",
        first_token_ns=t0 + 50 * MS,
        last_token_ns=t0 + 80 * MS,
        prompt_tokens=100 + i,
        output_tokens=4,
    )
    base.update(overrides)
    return RequestRecord(**base)


def manifest(suite: str = "serving", **overrides: Any) -> RunManifest:
    spec = {"suite": suite, "name": XSS, "description": XSS, "target": {"url": TARGET_URL}}
    base: dict[str, Any] = dict(
        run_id=f"20260101-000000-000000-{suite}-abc123",
        suite=suite,
        anchor_monotonic_ns=0,
        anchor_wall_time="2026-01-01T00:00:00.000+00:00",
        host={"cpu_model": XSS, "logical_cores": 2, "memory_bytes": 2**34, "gpus": []},
        spec_given=spec,
        spec_resolved=spec,
        target={"kind": "url", "url": TARGET_URL, "model": XSS, "engine_version": XSS},
        status="aborted",
        status_reason=XSS,
        notes=[XSS, "a plain note"],
    )
    base.update(overrides)
    return RunManifest(**base)


def empty(kind: str) -> pd.DataFrame:
    return table_to_frame(kind, SCHEMAS[kind].empty_table())


def serving_run() -> RunData:
    records = [request(i, "c=1") for i in range(6)]
    records += [request(i, XSS) for i in range(6, 12)]
    records.append(
        request(
            12,
            XSS,
            status="error",
            error_type="http_5xx",
            error_message=XSS,
            http_status=500,
            chunk_ns=[],
            chunk_tokens=[],
            first_token_ns=None,
            last_token_ns=None,
            output_tokens=None,
        )
    )
    return RunData(
        manifest=manifest(),
        requests=records_frame(records),
        steps=empty("steps"),
        summary=None,
        server_metrics=[],
        samples=empty("samples"),
    )


def training_run() -> RunData:
    steps = [
        StepRecord(
            step=s,
            rank=0,
            start_ns=s * 2_000 * MS,
            end_ns=s * 2_000 * MS + 1_000 * MS,
            tokens=4096,
            scenario=XSS,
            mfu=0.4,
            peak_memory_bytes=2**33,
            tokens_per_expert=[[1, 2, 3], [3, 2, 1]],
            events=[{"kind": "restart", "lost_s": 5.0, "why": XSS}] if s == 2 else [],
        ).to_dict()
        for s in range(4)
    ]
    return RunData(
        manifest=manifest("training", run_id="20260101-000000-000001-training-abc123"),
        requests=empty("requests"),
        steps=table_to_frame("steps", rows_to_table("steps", steps)),
        summary=None,
        server_metrics=[],
        samples=empty("samples"),
    )


def micro_run() -> RunData:
    samples = [
        SampleRecord(metric=XSS, value=v, unit="s", direction="lower", scenario="x").to_dict()
        for v in (1.0, 1.2, 0.9, 1.1)
    ]
    return RunData(
        manifest=manifest("micro", run_id="20260101-000000-000002-micro-abc123"),
        requests=empty("requests"),
        steps=empty("steps"),
        summary=None,
        server_metrics=[],
        samples=table_to_frame("samples", rows_to_table("samples", samples)),
    )


@pytest.fixture(scope="module")
def page() -> str:
    return build_report([serving_run(), training_run(), micro_run()], title=XSS)


def charts(page: str) -> int:
    return len(re.findall(r'<div id="chart-\d+" class="plotly-graph-div"', page))


def test_plotly_js_is_embedded_exactly_once(page):
    assert page.count(get_plotlyjs()) == 1
    assert page.count("window.PlotlyConfig") == 1
    assert charts(page) >= 12
    # One script for the config, one for plotly.js, one per chart: nothing else runs.
    tags = Tags(page).tags
    assert sum(1 for tag, _ in tags if tag == "script") == 2 + charts(page)


def test_nothing_is_loaded_from_anywhere(page):
    tags = Tags(page).tags
    for tag, attrs in tags:
        assert "src" not in attrs, tag
        if tag == "a":
            href = attrs["href"]
            assert href is not None and href.startswith("#")
    assert ("meta", {"http-equiv": "Content-Security-Policy", "content": CSP}) in tags
    assert "default-src 'none'" in CSP and "connect-src" not in CSP  # no fetch of any kind
    # Outside plotly.js itself (whose source names map-tile servers it is never asked
    # for here), the only URL is the target's, shown as text.
    rest = page.replace(get_plotlyjs(), "")
    for url in re.findall(r"https?://[^\s\"'<&\\]+", rest):
        assert url.startswith("http://127.0.0.1:9/"), url
    assert "cdn.plot.ly" not in rest and "mathjax.js" not in rest.lower()


def test_user_strings_are_escaped_and_never_markup(page):
    assert XSS_SCRIPT not in page
    assert XSS_ATTR not in page
    assert "<img" not in page.lower()
    parsed = Tags(page)
    assert {tag for tag, _ in parsed.tags} <= ALLOWED_TAGS
    for tag, attrs in parsed.tags:
        assert not any(name.startswith("on") for name in attrs), (tag, attrs)
    text = "".join(parsed.text)
    # Shown as text: spec name and description, notes, status reason, target URL and
    # model, engine version, host, error message, and the title.
    assert text.count(XSS) >= 10
    assert html.escape(TARGET_URL) in page
    assert f"<dd>{html.escape(XSS)}</dd>" in page  # e.g. the model
    assert f"<td>{html.escape(XSS)}</td>" in page  # the error message in the errors table
    assert f"<title>{html.escape(XSS)}</title>" in page


def test_figure_text_is_escaped_for_plotly_inside_safe_json(page):
    # Scenario, metric and policy names reach Plotly as "&lt;script&gt;...", which Plotly
    # shows as the literal characters; the JSON itself carries no "<" or "/" at all.
    plotly_escaped = html.escape(XSS, quote=False)
    json_form = plotly_escaped.replace("/", "\\u002f").replace('"', '\\"')
    assert page.count(json_form) >= 5
    for script in re.findall(r"<script[^>]*>(.*?)</script>", page, flags=re.DOTALL):
        if script.startswith("window.PlotlyConfig") or len(script) > 1_000_000:
            continue
        assert "<" not in script, script[:200]


def test_each_kind_gets_its_figures(page):
    sections = page.split('<section class="run"')[1:]
    # Serving: the interactivity chart too, its run having two load levels.
    assert [charts(s) for s in sections] == [10, 4, 1]
    assert "Expert load" in sections[1] and "effective tokens/s" in sections[1]
    assert "median 95% CI" in sections[2]


def test_the_appendix_quotes_the_definitions_from_the_code():
    appendix = appendix_html([])
    for module in (
        moeperf.collectors.latency,
        moeperf.collectors.summary,
        moeperf.collectors.quantiles,
    ):
        assert module.__doc__ is not None
        assert html.escape(inspect.cleandoc(module.__doc__)) in appendix
    assert "TPOT (per request): (last token time - first token time)" in appendix


def test_report_command_writes_into_the_run_directory(tmp_path):
    store = RunStore(tmp_path / "runs")
    with store.create("serving", spec_given={"name": XSS}) as run:
        for i in range(3):
            run.append_request(request(i, "c=1"))
    printed: list[str] = []
    assert report_command([run.run_id[:20]], str(store.root), print_fn=printed.append) == 0
    path = store.root / run.run_id / "report.html"
    assert printed == [str(path)]
    assert XSS_SCRIPT not in path.read_text(encoding="utf-8")
    out = tmp_path / "elsewhere" / "r.html"
    assert report_command(["latest"], str(store.root), str(out), print_fn=printed.append) == 0
    assert out.exists() and printed[-1] == str(out)


def test_report_command_refuses_unknown_runs(tmp_path):
    with pytest.raises(ReportUsageError, match="no run 'nope'"):
        report_command(["nope"], str(tmp_path), print_fn=lambda _line: None)
    with pytest.raises(ReportUsageError, match="at least one run"):
        report_command([], str(tmp_path), print_fn=lambda _line: None)


def test_the_benchmark_generator_makes_a_run_the_report_reads(tmp_path):
    from report_scale import synthetic_requests, write_run

    from moeperf.collectors.latency import per_request

    table = synthetic_requests(2_000, seed=3)
    frame = table_to_frame("requests", table)
    ok = frame[frame["status"] == "ok"]
    first_chunks = ok["chunk_ns"].map(lambda c: c[1])
    assert (first_chunks == ok["first_token_ns"]).all()  # chunk 0 is role-only
    assert (ok["output_tokens"] == ok["chunk_tokens"].map(sum)).all()
    assert (per_request(ok)["ttft_s"] > 0).all()
    store = RunStore(tmp_path)
    run_id = write_run(store, table)
    printed: list[str] = []
    assert report_command([run_id], str(tmp_path), print_fn=printed.append) == 0
    page = (tmp_path / run_id / "report.html").read_text(encoding="utf-8")
    assert "GENERATED records (2,000 requests)" in page
    assert charts(page) == 10  # errors and interactivity included
