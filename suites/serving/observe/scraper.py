"""Scrapes the target's /metrics over a run, through the dialect adapters of collectors.

Each scrape becomes one JSON-ready record for ``server_metrics.jsonl``::

    {"t_ns": ..., "dialect": "vllm", "window": "c=8",
     "series": [{"name", "labels", "kind", "value", "window_value", "run_value"}, ...]}

with counter increases scoped to the run and to the current window (a load level, an A/B
arm). The target's latency histograms (a counter per bucket: many series) are in the
records that close a window only (``start_window``, ``stop``): a level reads them from its
closing scrape, and a long run's file does not grow by them at every poll. A target that
cannot be scraped (HTTP 404, nothing listening, a body that is not Prometheus text, no
dialect we know) is recorded once, ``{"t_ns", "available": false, "reason", "url"}``, and
no longer polled: at once when the answer cannot change (an HTTP 4xx, a body we cannot
read), after ``max_failures`` failures in a row otherwise.

``TargetScraper`` is asyncio; ``ThreadedScraper`` runs one on its own thread and event
loop for the synchronous harness. ``on_sample`` is called on the scraper's loop (thread).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import aiohttp

from moeperf.collectors.sources.counter_window import CounterWindow
from moeperf.collectors.sources.target_dialects import HISTOGRAM_SERIES
from moeperf.collectors.sources.target_metrics import ExpositionError, read_exposition
from moeperf.suites.serving.load.auth import NO_HEADERS, RequestHeaders

OnSample = Callable[[dict[str, Any]], None]
ClockNs = Callable[[], int]
_T = TypeVar("_T")

# Ask for the classic text format (what prometheus_client's text parser reads).
_ACCEPT = "text/plain;version=0.0.4;q=1.0, */*;q=0.1"


class TargetScraper:
    """Polls ``{base_url}/metrics`` every ``interval_s`` on the running event loop.

    ``start()`` takes the first scrape (the run's baseline) before it returns;
    ``start_window(name)`` scrapes (closing the old window exactly) and opens a new one;
    ``stop()`` takes a final scrape so counters cover the whole window. ``clock_ns``
    stamps ``t_ns``; pass one measured from the run's anchor to match the request records.
    Every GET carries ``headers`` (the run's API key and spec headers); their secrets are
    masked in the reasons it records.
    """

    def __init__(
        self,
        base_url: str,
        interval_s: float,
        on_sample: OnSample,
        session: aiohttp.ClientSession | None = None,
        *,
        timeout_s: float = 5.0,
        max_failures: int = 3,
        window: str | None = None,
        clock_ns: ClockNs = time.monotonic_ns,
        headers: RequestHeaders = NO_HEADERS,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0; got {interval_s}")
        self.url = base_url.rstrip("/") + "/metrics"
        self._auth = headers
        # The spec's headers, and ours for the format (instead of one of theirs, any case).
        self._headers = {n: v for n, v in headers.values if n.lower() != "accept"}
        self._headers["Accept"] = _ACCEPT
        self.interval_s = interval_s
        self.window = window
        self._on_sample = on_sample
        self._session = session
        self._own_session = session is None
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._max_failures = max(1, max_failures)
        self._clock_ns = clock_ns
        self._counters = CounterWindow()
        self._failures = 0
        self._gave_up = False
        self._lock = asyncio.Lock()
        self._task: asyncio.Task | None = None
        self._error: BaseException | None = None

    @property
    def available(self) -> bool:
        """False once the target was recorded as having no usable /metrics."""
        return not self._gave_up

    async def start(self) -> None:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        try:
            await self.scrape_once()
        except BaseException:
            await self._close_session()
            raise
        self._task = asyncio.create_task(self._poll(), name="target-scraper")

    async def start_window(self, name: str | None) -> dict[str, Any] | None:
        """Close the current window with a scrape (returned), then open window ``name``."""
        async with self._lock:
            record = await self._scrape(closing=True)
            self._counters.start_window()
            self.window = name
        return record

    async def stop(self) -> None:
        """Final scrape, then stop polling; re-raises what ``on_sample`` raised, if it did."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        try:
            if self._error is None and self._session is not None:
                await self.scrape_once(closing=True)
        finally:
            await self._close_session()
        if self._error is not None:
            raise self._error

    async def _close_session(self) -> None:
        if self._own_session and self._session is not None:
            await self._session.close()
            self._session = None

    async def scrape_once(self, *, closing: bool = False) -> dict[str, Any] | None:
        """Scrape now; the record given to ``on_sample``, or None if none was made.
        ``closing``: the scrape ends a window, so its record keeps the histograms' series."""
        async with self._lock:
            return await self._scrape(closing=closing)

    async def _poll(self) -> None:
        loop = asyncio.get_running_loop()
        due = loop.time()
        try:
            while not self._gave_up:
                # Absolute deadlines: a slow scrape delays the next one, not all the rest.
                due = max(due + self.interval_s, loop.time())
                await asyncio.sleep(due - loop.time())
                await self.scrape_once()
        except Exception as exc:  # on_sample failed: surfaced by stop()
            self._error = exc

    async def _scrape(self, *, closing: bool = False) -> dict[str, Any] | None:
        if self._gave_up or self._session is None:
            return None
        t_ns = self._clock_ns()
        try:
            async with self._session.get(
                self.url, timeout=self._timeout, headers=self._headers
            ) as response:
                if response.status != 200:
                    final = 400 <= response.status < 500
                    return self._failed(t_ns, f"HTTP {response.status} from {self.url}", final)
                text = (await response.read()).decode("utf-8", errors="replace")
        except (aiohttp.ClientError, TimeoutError) as exc:
            return self._failed(t_ns, f"{type(exc).__name__}: {exc}".rstrip(": "), False)
        try:
            dialect, samples = read_exposition(text)
        except ExpositionError as exc:
            return self._failed(t_ns, self._auth.redact(str(exc))[:300], True)
        if dialect == "unknown":
            return self._failed(t_ns, "no known dialect (vllm:, sglang:, reference_, ...)", True)
        self._failures = 0
        # Every scrape is observed (a restart between edges is seen); histograms are kept
        # at the edges only.
        observed = self._counters.observe(samples)
        series = sorted(
            (w.to_dict() for w in observed if closing or w.name not in HISTOGRAM_SERIES),
            key=lambda s: (s["name"], sorted(s["labels"].items())),
        )
        record = {
            "t_ns": t_ns,
            "available": True,
            "dialect": dialect,
            "window": self.window,
            "series": series,
        }
        self._on_sample(record)
        return record

    def _failed(self, t_ns: int, reason: str, final: bool) -> dict[str, Any] | None:
        self._failures += 1
        if not final and self._failures < self._max_failures:
            return None
        self._gave_up = True
        reason = self._auth.redact(reason)  # stored: a server may echo what it was sent
        record = {"t_ns": t_ns, "available": False, "reason": reason, "url": self.url}
        self._on_sample(record)
        return record


class ThreadedScraper:
    """A ``TargetScraper`` on a daemon thread with its own event loop, for sync callers.

    Stop it before the run it writes to ends: ``on_sample`` runs on that thread.
    """

    def __init__(
        self,
        base_url: str,
        interval_s: float,
        on_sample: OnSample,
        *,
        timeout_s: float = 5.0,
        max_failures: int = 3,
        window: str | None = None,
        clock_ns: ClockNs = time.monotonic_ns,
        headers: RequestHeaders = NO_HEADERS,
    ) -> None:
        self._make_scraper = functools.partial(
            TargetScraper,
            base_url,
            interval_s,
            on_sample,
            timeout_s=timeout_s,
            max_failures=max_failures,
            window=window,
            clock_ns=clock_ns,
            headers=headers,
        )
        # Waits for a scrape: its HTTP timeout plus slack for the loop's own work.
        self._wait_s = timeout_s + 10.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.scraper: TargetScraper | None = None

    def start(self) -> None:
        loop = self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=loop.run_forever, name="target-scraper", daemon=True)
        self._thread.start()
        try:
            self._call(self._create_and_start())
        except BaseException:
            self._close_loop()
            raise

    async def _create_and_start(self) -> None:
        # Created on the scraper's loop: its asyncio.Lock and session belong there.
        self.scraper = self._make_scraper()
        await self.scraper.start()

    def start_window(self, name: str | None) -> dict[str, Any] | None:
        assert self.scraper is not None, "start() first"
        return self._call(self.scraper.start_window(name))

    def stop(self) -> None:
        if self._loop is None:
            return
        try:
            if self.scraper is not None:
                self._call(self.scraper.stop())
        finally:
            self._close_loop()

    def _call(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(self._wait_s)

    def _close_loop(self) -> None:
        loop, self._loop = self._loop, None
        if loop is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=self._wait_s)
        if not loop.is_running():
            loop.close()

    def __enter__(self) -> ThreadedScraper:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()
