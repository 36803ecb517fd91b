"""The target's own latencies beside the client's, as ``moeperf runs show`` and the report
show them: a table per level in the detail, the sentence on how the two differ and the KV
cache said once, one answer line only where the two are far apart, and nothing of it for a
target without the histograms. The level is read from two real vLLM pages."""

from __future__ import annotations

import dataclasses
import html
import io
from pathlib import Path
from typing import Any

from rich.console import Console

from moeperf.collectors.quantiles import Described, QuantileEstimate
from moeperf.collectors.records import RequestRecord
from moeperf.collectors.server_latency import CLIENT_VS_SERVER
from moeperf.collectors.serving_records import ScenarioSummary, ServingSummary, empty_scenario
from moeperf.collectors.sources.counter_window import CounterWindow
from moeperf.collectors.sources.target_metrics import read_exposition
from moeperf.collectors.store import RunStore
from moeperf.collectors.summary import summarize_requests
from moeperf.collectors.tables import records_frame
from moeperf.collectors.target_counters import TargetCounters, level_target_counters
from moeperf.reports.report import build_report
from moeperf.reports.runs import load_run
from moeperf.reports.server_latency_blocks import server_latency_table
from moeperf.reports.terminal.presentation import Presentation
from moeperf.reports.terminal.serving_lines import serving_lines

DATA = Path(__file__).parents[1] / "data" / "metrics"
PAGES = [(DATA / f"vllm-0.32.0-cpu-window-{edge}.prom").read_text() for edge in ("start", "end")]
MS = 1_000_000


def vllm_level() -> TargetCounters:
    """A level opened at the first page and closed at the second, as the scraper stores it."""
    counters = CounterWindow()
    records: list[dict[str, Any]] = []
    for text, window in ((PAGES[0], None), (PAGES[0], None), (PAGES[1], "c=6")):
        dialect, samples = read_exposition(text)
        series = [w.to_dict() for w in counters.observe(samples)]
        records.append({"t_ns": len(records), "available": True, "dialect": dialect,
                        "window": window, "series": series})  # fmt: skip
        counters.start_window()
    return level_target_counters(records)["c=6"]


def level(ttft_p50_s: float, counters: TargetCounters | None) -> ScenarioSummary:
    described = Described(6, ttft_p50_s, (QuantileEstimate(0.5, ttft_p50_s, None, None),))
    latency = dataclasses.replace(empty_scenario().latency_s, ttft_from_send_s=described)
    return dataclasses.replace(empty_scenario(), ok=6, requests=6, latency_s=latency,
                               target_counters=counters)  # fmt: skip


class NoScrapes:
    """A run reader whose scrapes were all readable (what serving_lines asks of it)."""

    def server_metrics(self) -> list[dict[str, Any]]:
        return []


def shown(**scenarios: ScenarioSummary) -> Presentation:
    summary = ServingSummary(scenarios=scenarios)
    return serving_lines(summary, NoScrapes())  # type: ignore[arg-type]


def text(items: Any) -> str:
    out = io.StringIO()
    console = Console(file=out, width=240, color_system=None)
    for item in items:
        console.print(item, markup=False, highlight=False)
    return out.getvalue()


def test_the_detail_has_a_client_vs_server_table_per_level_and_says_the_rest_once():
    counters = vllm_level()
    presented = shown(**{"c=6": level(0.2, counters), "c=12": level(0.21, counters)})
    detail = text(presented.detail)
    assert detail.count("client vs vllm") == 2  # one table per level
    for cell in ("TTFT p50", "TTFT p99", "TTFT mean", "ITL p50 (client: between chunks)",
                 "E2E p50", "queue mean (server only)", "exact (sum / count)"):  # fmt: skip
        assert cell in detail
    # The server's p50, 175 ms, with its bucket's bounds; the client's own beside it.
    row = next(line for line in detail.splitlines() if line.startswith("│ TTFT p50 "))
    assert "200.00" in row and "175.00" in row and "100-250" in row
    # Said once for the run: how the two differ, and the target's KV cache.
    flat = " ".join(detail.split())
    assert flat.count(CLIENT_VS_SERVER) == 1
    kv_cache = "KV cache (vllm): 8,192 blocks of 128 tokens (1,048,576 tokens), 1.00 GiB"
    assert flat.count(kv_cache) == 1
    # Each level's counters line has its cached prompt tokens; the per-level prefix-cache
    # table their share.
    assert "cached prompt tokens 6,144 of 6,822 (90%)" in flat
    cache_row = next(line for line in detail.splitlines() if line.startswith("│ c=6 "))
    assert "cached share" in detail and cache_row.count("90.1%") == 2  # hit rate, share
    # 200 ms against 175 ms in 100-250 ms: not far apart, no answer line.
    assert "far from" not in text(presented.answer)


def test_one_answer_line_when_the_client_and_server_are_far_apart():
    counters = vllm_level()
    presented = shown(**{"c=6": level(0.6, counters), "c=12": level(0.2, counters)})
    lines = [item for item in presented.answer if isinstance(item, str) and "TTFT p50" in item]
    assert lines == [
        "TTFT p50, the client's (from send) far from vllm's own: c=6 600.00 ms against "
        "175.00 ms (its 100-250 ms bucket) (--verbose: each level's client vs server, and how "
        "they differ)"
    ]


def test_a_target_without_histograms_shows_none_of_it():
    synthetic = TargetCounters(dialect="synthetic", gauge_scrapes=3, generation_tokens=64)
    presented = shown(**{"c=1": level(0.2, synthetic), "c=4": level(0.2, synthetic)})
    everything = text([*presented.answer, *presented.detail, *presented.unavailable])
    for absent in ("client vs", "far from", "KV cache (", "cached prompt", "cached share"):
        assert absent not in everything
    # What it lacks stays one line, as before.
    assert list(presented.unavailable) == [
        "target counters (synthetic): MTP, KV cache, preemptions, prefix cache: "
        "not available from this target"
    ]
    assert server_latency_table({"c=1": level(0.2, synthetic)}) is None


def make_run(store: RunStore, counters: TargetCounters) -> str:
    """A complete serving run of 6 ok requests whose summary has the vLLM level."""
    run = store.create("serving", spec_given={"name": "vllm"})
    records = []
    for i in range(6):
        t0 = i * 300 * MS
        chunks = [t0 + 200 * MS + k * 10 * MS for k in range(12)]
        record = RequestRecord(
            request_id=f"r{i}", scenario="c=6", phase="measure", worker=0,
            intended_send_ns=t0, send_ns=t0, done_ns=chunks[-1] + MS, status="ok",
            error_type=None, http_status=None, chunk_ns=chunks, chunk_tokens=[1] * 12,
            first_token_ns=chunks[0], last_token_ns=chunks[-1], output_tokens=12,
        )  # fmt: skip
        records.append(record)
        run.append_request(record)
    summary = summarize_requests(records_frame(records))
    scenario = dataclasses.replace(summary.scenarios["c=6"], target_counters=counters)
    run.write_summary(dataclasses.replace(summary, scenarios={"c=6": scenario}))
    run.complete()
    return run.run_id


def test_the_report_has_the_table_its_sentence_and_the_definitions(tmp_path):
    store = RunStore(tmp_path / "runs")
    run_id = make_run(store, vllm_level())
    page = build_report([load_run(store, run_id)], "vllm")
    assert "Client vs server" in page
    assert html.escape(CLIENT_VS_SERVER, quote=True) in page  # the caption quotes it
    assert "100-250" in page  # the server's TTFT p50 bucket, in ms
    assert "cached prompt share" in page
    assert "KV cache (vllm): 8,192 blocks of 128 tokens" in page
    # The appendix defines the server's histograms, from the same module.
    assert "<h4><code>collectors.server_latency</code></h4>" in page
    # The summary keeps the level's histograms: a second reading gives the same record.
    summary = store.open(run_id).summary()
    assert isinstance(summary, ServingSummary)
    assert summary.scenarios["c=6"].target_counters == vllm_level()
