"""The run's scraper over a server answering with real vLLM pages (tests/data/metrics):
the latency histograms' many series are stored in the scrapes that close a window only,
and a level still reads them whole."""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

from moeperf.collectors.export import metric_names as mn
from moeperf.collectors.sources.target_dialects import HISTOGRAM_SERIES
from moeperf.collectors.target_counters import level_target_counters
from moeperf.suites.serving.observe.scraper import TargetScraper

DATA = Path(__file__).parents[1] / "data" / "metrics"
START = (DATA / "vllm-0.32.0-cpu-window-start.prom").read_text()
END = (DATA / "vllm-0.32.0-cpu-window-end.prom").read_text()


def names(record: dict) -> set[str]:
    return {s["name"] for s in record["series"]}


async def test_histograms_are_stored_at_window_edges_and_read_per_level():
    pages = [START]

    async def metrics(_request: web.Request) -> web.Response:
        return web.Response(text=pages[-1], content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        records: list[dict] = []
        # No polling in the test's time: only the scrapes it asks for.
        scraper = TargetScraper(f"http://127.0.0.1:{runner.addresses[0][1]}", 600, records.append)
        await scraper.start()  # the run's baseline
        await scraper.start_window("c=6")  # closes the baseline's window, opens the level
        pages.append(END)  # the server counted 6 completions
        await scraper.scrape_once()  # a poll during the level
        await scraper.stop()  # closes the level
    finally:
        await runner.cleanup()
    baseline, opening, polled, closing = records
    assert [r["window"] for r in records] == [None, None, "c=6", "c=6"]
    for record in (baseline, polled):  # no histogram series, every counter and gauge
        assert not names(record) & HISTOGRAM_SERIES
        assert mn.TARGET_PREFIX_HITS.name in names(record)
    assert names(opening) >= HISTOGRAM_SERIES and names(closing) >= HISTOGRAM_SERIES
    level = level_target_counters(records)["c=6"]
    assert level.server_latency is not None and level.server_latency.ttft_s is not None
    assert level.server_latency.ttft_s.count == 6
    assert level.prompt_tokens_cached == 13312.0 - 7168.0
