"""Scraping the synthetic target's /metrics over loopback while it serves, and targets without."""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import pytest
from aiohttp import web

from moeperf.collectors.export import metric_names as mn
from moeperf.collectors.export.metric_names import (
    TARGET_FINISHED_REQUESTS,
    TARGET_GENERATION_TOKENS,
)
from moeperf.suites.serving.embedded.process import running_target
from moeperf.suites.serving.observe.scraper import TargetScraper, ThreadedScraper

OUTPUT_TOKENS = 20


@pytest.fixture(scope="module")
def target_url():
    # ~0.25 s per request: long enough for 20 ms scrapes to see it running.
    with running_target("moeperf.targets.synthetic", {"ttft_s": 0.05, "itl_s": 0.01}) as url:
        yield url


async def send(url: str, n: int) -> None:
    """``n`` concurrent streaming completions, read to the end."""

    async def one(session: aiohttp.ClientSession) -> None:
        body = {"model": "synthetic", "prompt": "hi", "max_tokens": OUTPUT_TOKENS, "stream": True}
        async with session.post(url + "/v1/completions", json=body) as response:
            assert response.status == 200
            assert (await response.read()).rstrip().endswith(b"[DONE]")

    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(one(session) for _ in range(n)))


def series(record: dict, name: str) -> dict:
    (found,) = [s for s in record["series"] if s["name"] == name and not s["labels"]]
    return found


@pytest.mark.timing
async def test_scrapes_see_the_load_and_count_its_requests(target_url):
    records: list[dict] = []
    scraper = TargetScraper(target_url, 0.02, records.append)
    await scraper.start()
    await send(target_url, 4)
    await scraper.stop()
    json.dumps(records, allow_nan=False)  # what server_metrics.jsonl stores
    assert all(r["available"] and r["dialect"] == "synthetic" for r in records)
    assert len(records) >= 5
    assert [r["t_ns"] for r in records] == sorted(r["t_ns"] for r in records)
    assert max(series(r, mn.TARGET_RUNNING.name)["value"] for r in records) > 0
    last = records[-1]  # the final scrape at stop: after every request ended
    assert series(last, mn.TARGET_RUNNING.name)["value"] == 0
    finished = series(last, TARGET_FINISHED_REQUESTS.name)
    assert finished["kind"] == "counter"
    assert finished["window_value"] == finished["run_value"] == 4
    assert series(last, TARGET_GENERATION_TOKENS.name)["run_value"] == 4 * OUTPUT_TOKENS


async def test_windows_split_the_counts_of_a_run(target_url):
    records: list[dict] = []
    scraper = TargetScraper(target_url, 0.5, records.append, window="warmup")
    await scraper.start()
    await scraper.start_window("c=2")
    await send(target_url, 2)
    closing = await scraper.start_window("c=3")
    await send(target_url, 3)
    await scraper.stop()
    assert closing is not None and closing["window"] == "c=2"
    assert series(closing, TARGET_FINISHED_REQUESTS.name)["window_value"] == 2
    last = records[-1]
    assert last["window"] == "c=3"
    finished = series(last, TARGET_FINISHED_REQUESTS.name)
    assert (finished["window_value"], finished["run_value"]) == (3, 5)


def test_threaded_scraper_serves_a_synchronous_caller(target_url):
    records: list[dict] = []
    clock_anchor = time.monotonic_ns()
    scraper = ThreadedScraper(
        target_url, 0.05, records.append, clock_ns=lambda: time.monotonic_ns() - clock_anchor
    )
    with scraper:
        asyncio.run(send(target_url, 2))
        scraper.start_window("next")
    assert scraper._thread is not None
    assert not scraper._thread.is_alive()
    assert 0 <= records[0]["t_ns"] < 10**10  # from the anchor given
    finished = series(records[-1], TARGET_FINISHED_REQUESTS.name)
    assert (finished["window_value"], finished["run_value"]) == (0, 2)
    assert records[-1]["window"] == "next"


async def test_nothing_listening_is_recorded_once_then_left_alone(unused_tcp_port):
    records: list[dict] = []
    url = f"http://127.0.0.1:{unused_tcp_port}"
    scraper = TargetScraper(url, 0.01, records.append, max_failures=3)
    await scraper.start()
    await asyncio.sleep(0.2)  # ~20 intervals: it must stop after 3 failures
    await scraper.stop()
    assert len(records) == 1
    (record,) = records
    assert record["available"] is False and not scraper.available
    assert "Connect" in record["reason"] and record["url"] == url + "/metrics"


@pytest.mark.parametrize(
    ("body", "status", "reason"),
    [
        (None, 404, "HTTP 404"),
        (b"<html><body>hello</body></html>", 200, "not Prometheus"),
        (
            b"# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 1\n",
            200,
            "dialect",
        ),
    ],
)
async def test_a_server_without_usable_metrics_is_recorded_once(body, status, reason):
    hits: list[int] = []

    async def metrics(_request: web.Request) -> web.Response:
        hits.append(1)
        return web.Response(status=status, body=body)

    app = web.Application()
    if body is not None:
        app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        records: list[dict] = []
        scraper = TargetScraper(f"http://127.0.0.1:{runner.addresses[0][1]}", 0.01, records.append)
        await scraper.start()
        await asyncio.sleep(0.1)
        await scraper.stop()
    finally:
        await runner.cleanup()
    assert [(r["available"], reason in r["reason"]) for r in records] == [(False, True)]
    assert len(hits) <= 1  # an answer that cannot change is not asked for again


async def test_an_on_sample_failure_surfaces_at_stop(target_url):
    calls: list[dict] = []

    def on_sample(record: dict) -> None:
        calls.append(record)
        if len(calls) == 2:
            raise OSError("disk full")

    scraper = TargetScraper(target_url, 0.01, on_sample)
    await scraper.start()
    await asyncio.sleep(0.1)
    with pytest.raises(OSError, match="disk full"):
        await scraper.stop()
    assert len(calls) == 2  # polling stopped at the failure
