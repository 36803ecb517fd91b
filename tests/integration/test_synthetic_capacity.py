"""The synthetic server's known capacity (``max_concurrent_streams``) over real loopback HTTP.

The server runs as its own process (``running_target``) so the clients here do not share
its event loop. With N slots, N concurrent requests start at once and the others wait in
arrival order for one to finish: their TTFT is the queue wait plus ``ttft_s``, and the
ground truth says how long each waited. A client that goes away, queued or streaming,
frees its place. Tolerances suit a loaded 2-core machine: these check order and
behaviour, not speed.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from moeperf.suites.serving.embedded.process import running_target

TTFT_S = 0.05
ITL_S = 0.01
TOKENS = 20
E2E_S = TTFT_S + (TOKENS - 1) * ITL_S  # 0.24 s: first chunk, then 19 gaps
TOLERANCE_S = 0.04
NS_PER_S = 1e9


@dataclass
class Stream:
    """One streamed completion as the client saw it."""

    response_id: str
    sent_ns: int
    first_token_ns: int

    @property
    def ttft_s(self) -> float:
        return (self.first_token_ns - self.sent_ns) / NS_PER_S


def completion(max_tokens: int) -> dict[str, Any]:
    return {"model": "synthetic", "prompt": "x", "max_tokens": max_tokens, "stream": True}


async def stream(session: aiohttp.ClientSession, url: str, max_tokens: int) -> Stream:
    """Send a streamed completion, read it to the end; when its first token arrived."""
    sent_ns = time.monotonic_ns()
    async with session.post(url + "/v1/completions", json=completion(max_tokens)) as response:
        assert response.status == 200
        first_token_ns = None
        async for line in response.content:
            # Completions have no role chunk: the first data event carries the first token.
            if first_token_ns is None and line.startswith(b"data: {"):
                first_token_ns = time.monotonic_ns()
        assert first_token_ns is not None
        return Stream(response.headers["X-Request-Id"], sent_ns, first_token_ns)


async def ground_truth(session: aiohttp.ClientSession, url: str, ids: list[str]) -> list[dict]:
    async with session.post(url + "/ground_truth/query", json={"ids": ids}) as answer:
        body = await answer.json()
    assert body["missing"] == []
    return [body["records"][i] for i in ids]


async def gauges(session: aiohttp.ClientSession, url: str) -> tuple[float, float]:
    """(running, waiting) from the server's /metrics."""
    async with session.get(url + "/metrics") as answer:
        text = await answer.text()
    values = {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    return values["synthetic_requests_running"], values["synthetic_requests_waiting"]


async def wait_for_gauges(
    session: aiohttp.ClientSession, url: str, expected: tuple[float, float], timeout_s: float
) -> tuple[float, float]:
    """Poll /metrics until (running, waiting) is ``expected`` or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while (seen := await gauges(session, url)) != expected and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    return seen


def config(max_concurrent_streams: int) -> dict[str, Any]:
    return {"ttft_s": TTFT_S, "itl_s": ITL_S, "max_concurrent_streams": max_concurrent_streams}


@pytest.mark.timing
def test_two_slots_start_two_streams_at_once_and_queue_the_others_fifo():
    async def main(url: str) -> tuple[list[Stream], list[dict], tuple[float, float]]:
        async with aiohttp.ClientSession() as session:
            streams = await asyncio.gather(*(stream(session, url, TOKENS) for _ in range(4)))
            truth = await ground_truth(session, url, [s.response_id for s in streams])
            after = await gauges(session, url)
        return list(streams), truth, after

    with running_target("moeperf.targets.synthetic", config(2)) as url:
        streams, truth, after = asyncio.run(main(url))

    assert after == (0, 0)
    assert all(r["status"] == "ok" and r["completion_tokens"] == TOKENS for r in truth)
    waits_s = [r["queue_wait_ns"] / NS_PER_S for r in truth]
    assert all(r["dequeued_ns"] - r["received_ns"] == r["queue_wait_ns"] for r in truth)
    started = [i for i, wait in enumerate(waits_s) if wait < TOLERANCE_S]
    queued = [i for i, wait in enumerate(waits_s) if wait >= TOLERANCE_S]
    assert len(started) == 2 and len(queued) == 2, waits_s
    for i in queued:
        assert waits_s[i] == pytest.approx(E2E_S, abs=TOLERANCE_S)
    # Each queued request got the slot of a finished one, as soon as it was free (FIFO:
    # the earlier arrival the earlier slot).
    done_ns = sorted(truth[i]["done_ns"] for i in started)
    queued_in_arrival_order = sorted(queued, key=lambda i: truth[i]["received_ns"])
    dequeued_ns = [truth[i]["dequeued_ns"] for i in queued_in_arrival_order]
    assert dequeued_ns == sorted(dequeued_ns)
    for finished, dequeued in zip(done_ns, dequeued_ns, strict=True):
        assert 0 <= dequeued - finished < TOLERANCE_S * NS_PER_S
    for s, r in zip(streams, truth, strict=True):
        # The configured TTFT counts from leaving the queue...
        server_ttft_s = (r["chunk_write_ns"][0] - r["dequeued_ns"]) / NS_PER_S
        assert TTFT_S <= server_ttft_s < TTFT_S + TOLERANCE_S
        # ...and the client sees the wait on top of it.
        assert s.first_token_ns >= r["chunk_write_ns"][0]
        assert s.ttft_s == pytest.approx(r["queue_wait_ns"] / NS_PER_S + TTFT_S, abs=TOLERANCE_S)
    for i in started:
        assert streams[i].ttft_s == pytest.approx(TTFT_S, abs=TOLERANCE_S)
    for i in queued:
        assert streams[i].ttft_s == pytest.approx(E2E_S + TTFT_S, abs=TOLERANCE_S)


@pytest.mark.timing
def test_a_client_that_goes_away_queued_or_streaming_frees_its_place():
    long_tokens = 1000  # 10 s of stream: nothing here may wait for it to end

    async def main(url: str) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with aiohttp.ClientSession() as session:
            streaming = asyncio.create_task(stream(session, url, long_tokens))
            seen["one_streaming"] = await wait_for_gauges(session, url, (1, 0), 5)
            queued = asyncio.create_task(stream(session, url, TOKENS))
            seen["one_queued"] = await wait_for_gauges(session, url, (1, 1), 5)
            queued.cancel()  # the client closes the connection before any byte came back
            seen["queue_left"] = await wait_for_gauges(session, url, (1, 0), 3)
            streaming.cancel()
            seen["slot_freed"] = await wait_for_gauges(session, url, (0, 0), 3)
            later = await asyncio.wait_for(stream(session, url, TOKENS), 5)
            seen["later"] = later
            ids = ["cmpl-1", "cmpl-2", later.response_id]
            seen["truth"] = await ground_truth(session, url, ids)
        return seen

    with running_target("moeperf.targets.synthetic", config(1)) as url:
        seen = asyncio.run(main(url))

    assert seen["one_streaming"] == (1, 0)
    assert seen["one_queued"] == (1, 1)
    assert seen["queue_left"] == (1, 0), "a cancelled queued request still holds its place"
    assert seen["slot_freed"] == (0, 0), "a cancelled stream still holds its slot"
    streamed, gone_while_queued, later = seen["truth"]
    assert streamed["status"] == "cancelled"
    assert 0 < streamed["completion_tokens"] < long_tokens
    assert gone_while_queued["status"] == "cancelled"
    assert gone_while_queued["dequeued_ns"] is None and gone_while_queued["chunk_write_ns"] == []
    assert later["status"] == "ok" and later["queue_wait_ns"] < TOLERANCE_S * NS_PER_S
    assert seen["later"].ttft_s == pytest.approx(TTFT_S, abs=TOLERANCE_S)
