"""A recorded DCGM exporter page served over loopback, scraped with the default transport
(urllib), read into samples per GPU; pages without DCGM series, failed scrapes and an absent
exporter are "not available" or counted errors, never a crash."""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import web
from loopback import serving_in_thread

from moeperf.collectors.accel_records import DeviceSample, Unavailable
from moeperf.collectors.sources.accel_sampler import DeviceSampler
from moeperf.collectors.sources.dcgm_source import DcgmSource, open_dcgm

DATA = Path(__file__).parents[1] / "data/accel"
DCGM_PAGE = (DATA / "dcgm_exporter_h200x2.prom").read_text()
NODE_PAGE = (DATA / "node_exporter.prom").read_text()


def page(text: str) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(text=text, content_type="text/plain")

    return handler


def test_an_exporter_page_over_http_gives_samples_per_gpu() -> None:
    with serving_in_thread({}, {"/metrics": page(DCGM_PAGE)}) as url:
        source = open_dcgm(url)  # the base URL: /metrics is added
        assert isinstance(source, DcgmSource), source
        gpu0, gpu1 = source.read(7, "c=2")
    assert source.name == f"dcgm {url}/metrics"
    assert (gpu0.device, gpu1.device) == ("gpu-node-7:gpu0", "gpu-node-7:gpu1")
    assert gpu0.power_w == 612.345 and gpu1.power_w == 487.12
    assert gpu0.energy_j == 48213370.544 and gpu1.utilization_ratio == 0.84
    assert gpu0.t_ns == 7 and gpu0.scenario == "c=2"


def test_a_node_exporter_page_is_not_available() -> None:
    with serving_in_thread({}, {"/metrics": page(NODE_PAGE)}) as url:
        result = open_dcgm(url + "/metrics")
    assert result == Unavailable(f"no DCGM series on {url}/metrics")


def test_nothing_listening_is_not_available() -> None:
    with socket.socket() as s:  # a port that was free a moment ago
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = open_dcgm(f"http://127.0.0.1:{port}/metrics", timeout_s=1.0)
    assert isinstance(result, Unavailable) and "cannot reach" in result.reason


def test_failed_scrapes_during_a_run_are_counted_and_sampling_goes_on() -> None:
    answers = iter([200, 500, 200, 503])

    async def flaky(request: web.Request) -> web.Response:
        status = next(answers, 200)
        if status != 200:
            return web.Response(status=status, text="exporter restarting")
        return web.Response(text=DCGM_PAGE, content_type="text/plain")

    stored: list[DeviceSample] = []
    with serving_in_thread({}, {"/metrics": flaky}) as url:
        sampler = DeviceSampler([DcgmSource(url)], anchor_ns=0, store=stored.append)
        for _ in range(5):
            sampler.read_once()
    (errors,) = sampler.cost().errors
    assert errors.source == f"dcgm {url}/metrics" and errors.count == 2
    assert errors.last == f"ScrapeError: HTTP 503 from {url}/metrics"
    assert len(stored) == 2 * 3  # two GPUs on each of the three good scrapes
