"""The manifest's record of what the requests asked, taken from the worker config itself.

The runner stores ``request_settings(config, ...)`` of the ``WorkerConfig`` it hands the
workers, after every change made to it (a probe may turn off a field the target rejects),
so the record is what the request builder (openai_api.request_body) sends, not what the
spec said. Headers are left out on purpose: their values may be credentials.
"""

from __future__ import annotations

from moeperf.collectors.request_settings import RequestSettings
from moeperf.suites.serving.load.plan import WorkerConfig


def request_settings(config: WorkerConfig, scrape_interval_s: float | None) -> RequestSettings:
    """What every request of a run with ``config`` sends; ``scrape_interval_s``: how often
    the target's /metrics are scraped (None: not scraped)."""
    return RequestSettings(
        api=config.api,
        sampling=config.sampling,
        include_usage=config.include_usage,
        # request_body sends continuous_usage_stats only inside stream_options.
        continuous_usage=config.include_usage and config.continuous_usage,
        ignore_eos=config.ignore_eos,
        min_tokens=config.min_tokens,
        max_tokens_field=config.max_tokens_field,
        extra_body=dict(config.extra_body),
        scrape_interval_s=scrape_interval_s,
    )
