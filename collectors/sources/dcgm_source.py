"""GPUs on any host through a DCGM exporter's /metrics page, scraped over HTTP.

``open_dcgm(url)`` scrapes once to see what is there: a ``DcgmSource``, or ``Unavailable``
when the page cannot be fetched or carries no DCGM series (a node exporter's page, say).
Afterwards a failed scrape raises ``ScrapeError`` from ``read``, which the sampler counts as
an error of this source and goes on: one lost sample, not a lost run.

The HTTP GET is a ``Transport`` passed in (tests pass their own); the default uses the
standard library, so the sampler's thread needs no event loop and no extra package.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable
from urllib.parse import urlsplit, urlunsplit

from moeperf.collectors.accel_records import DeviceSample, Unavailable
from moeperf.collectors.errors import CollectorError
from moeperf.collectors.sources.dcgm_dialect import dcgm_samples
from moeperf.collectors.sources.target_metrics import ExpositionError, parse_exposition

# GET ``url`` within ``timeout_s`` and return the body as text; raise ``ScrapeError`` (or an
# ``OSError``) on any failure, an HTTP error status included.
Transport = Callable[[str, float], str]

# Ask for the classic text format (what prometheus_client's text parser reads).
_ACCEPT = "text/plain;version=0.0.4;q=1.0, */*;q=0.1"


class ScrapeError(CollectorError):
    """A DCGM exporter's page could not be fetched or read."""


def urllib_get(url: str, timeout_s: float) -> str:
    """The default ``Transport``: urllib, no proxy from the environment, UTF-8 text."""
    request = urllib.request.Request(url, headers={"Accept": _ACCEPT})
    # An exporter is reached directly: an http_proxy set for the internet would be wrong.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=timeout_s) as response:
            body: bytes = response.read()
    except urllib.error.HTTPError as exc:
        raise ScrapeError(f"HTTP {exc.code} from {url}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ScrapeError(f"cannot reach {url}: {reason}") from None
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        raise ScrapeError(f"{url}: the page is not UTF-8 text") from None


def metrics_url(url: str) -> str:
    """``url`` with ``/metrics`` as its path where it has none (``http://node1:9400``)."""
    parts = urlsplit(url)
    if parts.path in ("", "/"):
        parts = parts._replace(path="/metrics")
    return urlunsplit(parts)


class DcgmSource:
    """Scrapes one exporter; each read gives a sample per GPU on its page."""

    def __init__(self, url: str, transport: Transport = urllib_get, timeout_s: float = 2.0):
        self.url = metrics_url(url)
        self._transport = transport
        self._timeout_s = timeout_s
        self._host = urlsplit(self.url).hostname or self.url

    @property
    def name(self) -> str:
        return f"dcgm {self.url}"

    def read(self, t_ns: int, scenario: str) -> list[DeviceSample]:
        try:
            text = self._transport(self.url, self._timeout_s)
        except OSError as exc:  # a transport that lets the socket's error through
            raise ScrapeError(f"cannot reach {self.url}: {exc}") from None
        try:
            families = parse_exposition(text)
        except ExpositionError as exc:
            raise ScrapeError(f"{self.url}: {exc}") from None
        samples = dcgm_samples(families, t_ns, scenario, self._host)
        if not samples:
            raise ScrapeError(f"no DCGM series on {self.url}")
        return samples

    def close(self) -> None:
        pass


def open_dcgm(
    url: str, transport: Transport = urllib_get, timeout_s: float = 2.0
) -> DcgmSource | Unavailable:
    """A source for the exporter at ``url`` if one scrape of it shows DCGM series."""
    source = DcgmSource(url, transport, timeout_s)
    try:
        source.read(0, "")
    except ScrapeError as exc:
        return Unavailable(str(exc))
    return source
