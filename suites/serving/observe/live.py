"""What the runner shows the outside world while it measures: live /metrics, target
scrapes, and the push at the end. Everything here runs in the parent process."""

from __future__ import annotations

import time
from collections.abc import Callable

from moeperf.collectors.accel_records import DeviceSample
from moeperf.collectors.export.live_export import LiveExporter
from moeperf.collectors.export.push import push_run
from moeperf.collectors.records import RequestRecord
from moeperf.collectors.store import RunWriter
from moeperf.collectors.summary import Slo
from moeperf.collectors.target_counters import TargetCounters, level_target_counters
from moeperf.suites.serving.load.auth import NO_HEADERS, RequestHeaders
from moeperf.suites.serving.load.engine import WorkerHealth
from moeperf.suites.serving.spec import ServingSpec


class LiveObservers:
    """The live exporter and the target scraper of one run (either may be off)."""

    def __init__(
        self,
        spec: ServingSpec,
        run: RunWriter,
        base_url: str,
        target_name: str,
        pushgateway_url: str | None,
        say: Callable[[str], None] = lambda _line: None,
        headers: RequestHeaders = NO_HEADERS,
    ):
        self._spec = spec
        self._run = run
        self._suite = spec.name
        self._target = target_name
        self._pushgateway_url = pushgateway_url
        self._say = say
        wanted = spec.export.live_metrics or bool(pushgateway_url)
        slo = Slo(**spec.slo.model_dump())
        self.exporter = LiveExporter(spec.name, target_name, slo=slo) if wanted else None
        self._scraper = None
        if spec.export.scrape_target:
            from moeperf.suites.serving.observe.scraper import ThreadedScraper

            anchor_ns = run.manifest.anchor_monotonic_ns
            self._scraper = ThreadedScraper(
                base_url,
                spec.export.scrape_interval_s,
                self._scraped,
                # Scrape times on the records' time base: ns from the run's anchor.
                clock_ns=lambda: time.monotonic_ns() - anchor_ns,
                headers=headers,  # a target behind a key guards its /metrics too
            )
        self._in_flight: dict[int, int] = {}
        # Every scrape of the run, for a level's counters while the run goes on.
        self._scrapes: list[dict] = []

    def start(self) -> None:
        if self.exporter is not None and self._spec.export.live_metrics:
            port = self.exporter.serve(self._spec.export.metrics_port)
            self._say(f"live metrics: http://127.0.0.1:{port}/metrics")
        if self._scraper is not None:
            self._scraper.start()

    def level_started(self, scenario: str, level: float) -> None:
        self._in_flight.clear()
        if self._scraper is not None:
            # Counter deltas are scoped to the level they happened in.
            self._scraper.start_window(scenario)
        if self.exporter is not None:
            self.exporter.start_level(scenario, level)

    def record(self, record: RequestRecord) -> None:
        if self.exporter is not None:
            self.exporter.observe_request(record)

    def device(self, sample: DeviceSample) -> None:
        """A device sampler's reading (on the sampler's thread) to the live export."""
        if self.exporter is not None:
            self.exporter.observe_device(sample)

    def health(self, health: WorkerHealth) -> None:
        if self.exporter is None:
            return
        self._in_flight[health.worker] = health.in_flight
        self.exporter.set_in_flight(health.scenario, sum(self._in_flight.values()))
        self.exporter.observe_worker(health.worker, health.loop_lag_p99_s, health.cpu_ratio)

    def level_done(self, scenario: str, client_bound: bool) -> None:
        if self.exporter is None:
            return
        self.exporter.end_level(scenario)
        if client_bound:
            self.exporter.client_bottleneck()

    def _scraped(self, scrape: dict) -> None:
        # Called on the scraper's thread; the store's files are per kind, so appending
        # server metrics here does not interleave with request records.
        self._run.append_server_metrics(scrape)
        self._scrapes.append(scrape)
        # The window is the load level; the baseline scrape before the first has none.
        window = scrape.get("window")
        if self.exporter is not None and window and scrape.get("series"):
            self.exporter.observe_target(window, scrape["series"])

    def close_level(self) -> None:
        """Close the running level's window with a scrape now, not when the next level
        starts: its counters are then whole (``level_counters``)."""
        if self._scraper is not None:
            self._scraper.start_window(None)

    def level_counters(self, scenario: str) -> TargetCounters | None:
        """The target's counters over a closed level (None: no scrape of it was read)."""
        return level_target_counters(list(self._scrapes)).get(scenario)

    def stop_scraping(self) -> None:
        """Before the run ends: a last scrape, so counters cover the whole window."""
        if self._scraper is not None:
            self._scraper.stop()
            self._scraper = None

    def finish(self, status: str) -> None:
        """After the run ended: push to the Pushgateway if one is configured, then close."""
        self.stop_scraping()
        if self.exporter is None:
            return
        if self._pushgateway_url:
            warning = push_run(
                self._pushgateway_url,
                self.exporter,
                suite=self._suite,
                target=self._target,
                success=status == "complete",
            )
            if warning:
                self._run.add_note(f"warning: {warning}")
                self._say(f"warning: {warning}")
        self.exporter.close()
