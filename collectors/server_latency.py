"""The target's own latency histograms (vLLM), per level, beside the client's figures.

vLLM records four latencies per request in Prometheus histograms (in vLLM's source:
vllm/v1/metrics/stats.py, vllm/renderers/base.py where ``arrival_time`` is taken, and its
design page docs/design/metrics.md). The run's scrapes keep each bucket's increase over a
load level (``collectors.sources``: a counter per bucket, windowed like every counter), and
each level gets a ``ServerLatency`` (``TargetCounters.server_latency``):

- TTFT (``vllm:time_to_first_token_seconds``): from the request's ``arrival_time``, taken by
  the API server when it starts preparing the request (the HTTP body already read and
  parsed; chat template and tokenizing come after), to when the API server's output
  handler takes the batch holding the first token from the engine core, before the token
  is detokenized and streamed.
- Inter-token latency (``vllm:inter_token_latency_seconds``, before vLLM renamed it
  ``vllm:time_per_output_token_seconds``): the gap between the engine-step timestamps of
  a request's successive outputs. One sample per step: a step that yields several tokens
  (speculative decoding, MTP) is one sample, not divided over its tokens, so it compares
  with the client's ICL (inter-chunk latency); without MTP, ITL and ICL are the same.
- E2E (``vllm:e2e_request_latency_seconds``): ``arrival_time`` to when the output handler
  takes the last token.
- Queue time (``vllm:request_queue_time_seconds``): in the engine core, from when the
  request entered the scheduler's waiting queue to when it was first scheduled into a
  batch; waiting again after a preemption is not in it.

The client's TTFT from send counts from sending the request to the first streamed chunk
carrying a token; vLLM's counts from when its API server started preparing the request to
when it took the first token from the engine: the difference is the network both ways, the
server's work outside that span (reading and parsing the HTTP request before it,
detokenizing and streaming the chunk after it) and the client's reading of the chunk; chat
templating, tokenizing and vLLM's queue time (the wait for a batch slot) are inside both.

Per level and histogram: ``count`` (requests, or steps for ITL), ``mean_s`` = sum / count,
exact; p50 and p99 estimated from the buckets as Prometheus' ``histogram_quantile`` does: the
bucket holding rank q x count, linearly interpolated between its bounds (the first bucket
from 0; in the ``+Inf`` bucket, its finite lower bound: the value is above it). The buckets
are coarse (vLLM's TTFT has 0.25-0.5 s, its queue time starts with 0-0.3 s), so an estimate
is always shown with the bounds of its bucket, and never mixed with the client's
percentiles (from raw samples, ``collectors.quantiles``). Beside them, the client's TTFT
from send, its gaps between token-carrying chunks (ICL) and its E2E (from the intended send
time: in closed loop the send itself; open loop adds its queue delay). The target counts
every request that finished in the level's window, warm-up, cool-down and failed ones
included; the client's figures are its measured ok requests. The two TTFT p50s are "far
apart" when the client's lies outside the server's p50 bucket and the larger is over 1.5
times the other: a gap the buckets cannot explain (the one answer line that says so).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping
from dataclasses import dataclass

FAR_APART_RATIO = 1.5  # the larger p50 over the smaller, beyond the server's bucket


def _paragraph(starting: str) -> str:
    """The paragraph of this module's docstring that starts with ``starting``, on one line:
    the report and the terminal quote it, so it is written once."""
    doc = inspect.cleandoc(__doc__ or "")
    found = next(p for p in doc.split("\n\n") if p.startswith(starting))
    return " ".join(found.split())


# The difference between the client's TTFT and vLLM's, in one sentence.
CLIENT_VS_SERVER = _paragraph("The client's TTFT from send")


@dataclass(frozen=True, slots=True)
class BucketEstimate:
    """A quantile of a server histogram, estimated from its buckets."""

    q: float
    value_s: float  # interpolated in its bucket; in the +Inf bucket, its lower bound
    lower_s: float  # the bounds of the bucket that holds it
    upper_s: float | None  # None: the +Inf bucket (the value is above lower_s)


@dataclass(frozen=True, slots=True)
class ServerHistogram:
    """One of the target's latency histograms over a level: its buckets' increase."""

    count: float  # observations (requests; engine steps for ITL)
    sum_s: float
    mean_s: float | None  # sum / count, exact; None: no observation
    p50: BucketEstimate | None
    p99: BucketEstimate | None
    bounds_s: tuple[float, ...] = ()  # the finite upper bounds (le), ascending
    cumulative: tuple[float, ...] = ()  # observations at or under each bound


@dataclass(frozen=True, slots=True)
class ServerLatency:
    """The target's own latencies over a level (None: it exports no such histogram)."""

    ttft_s: ServerHistogram | None = None
    itl_s: ServerHistogram | None = None
    e2e_s: ServerHistogram | None = None
    queue_s: ServerHistogram | None = None


def bucket_quantile(
    q: float, bounds_s: tuple[float, ...], cumulative: tuple[float, ...], total: float
) -> BucketEstimate | None:
    """Quantile ``q`` of ``total`` observations with ``cumulative`` of them at or under each
    finite bound (the rest in +Inf), as Prometheus' ``histogram_quantile``; None: none."""
    if total <= 0:
        return None
    rank = q * total
    below, lower = 0.0, 0.0
    for i, (upper, at_or_under) in enumerate(zip(bounds_s, cumulative, strict=True)):
        if at_or_under >= rank:
            if i == 0 and upper <= 0:
                return BucketEstimate(q, upper, upper, upper)  # as Prometheus: no lower bound
            inside = at_or_under - below
            value = lower + (upper - lower) * (rank - below) / inside if inside > 0 else upper
            return BucketEstimate(q, value, lower, upper)
        below, lower = at_or_under, upper
    top = bounds_s[-1] if bounds_s else 0.0
    return BucketEstimate(q, top, top, None)


def server_histogram(buckets: Mapping[float, float], count: float, sum_s: float) -> ServerHistogram:
    """A level's histogram from each bucket's increase (upper bound -> observations at or
    under it, +Inf included), its count's and its sum's."""
    bounds = tuple(sorted(b for b in buckets if math.isfinite(b)))
    cumulative: list[float] = []
    for bound in bounds:  # monotonic, as Prometheus makes it (copies windowed apart)
        cumulative.append(max(buckets[bound], cumulative[-1] if cumulative else 0.0))
    total = buckets.get(math.inf, count)

    def at(q: float) -> BucketEstimate | None:
        return bucket_quantile(q, bounds, tuple(cumulative), total)

    mean = sum_s / count if count > 0 else None
    return ServerHistogram(count, sum_s, mean, at(0.5), at(0.99), bounds, tuple(cumulative))


def far_apart(client_s: float | None, server: BucketEstimate | None) -> bool:
    """Whether a client's p50 and the server's are further apart than the server's
    buckets explain (this module's docstring)."""
    if client_s is None or server is None or client_s <= 0 or server.value_s <= 0:
        return False
    upper = math.inf if server.upper_s is None else server.upper_s
    inside = server.lower_s <= client_s <= upper
    ratio = max(client_s, server.value_s) / min(client_s, server.value_s)
    return not inside and ratio > FAR_APART_RATIO
