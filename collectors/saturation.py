"""Whether an open-loop level offered its target more than it could serve.

A target over-saturated by its arrivals builds a queue for as long as the level lasts, so
the level's latencies measure the queue, not the server, and grow with the level's length.
Three signs, each measured over the level's window (the measured requests' scheduled
arrivals, first to last), and the level is over-saturated only when all three show:

1. **fewer completions than arrivals:** the requests of the level (every phase) that ended
   (not cancelled by the harness: those were not served) inside the window shifted by the
   measured requests' median time from arrival to end,
   per second, fall below the arrival rate by more than 10% (``COMPLETION_SHORTFALL``). A
   target that keeps up ends each arrival about that much later, so the shifted window
   holds as many completions as the window holds arrivals; one that cannot ends no more
   than its capacity, however far the window is shifted;
2. **requests in flight keep growing:** at each measured arrival, the level's requests
   scheduled so far minus those ended so far; the least-squares slope of that count against
   time, in requests per second, is positive by more than its margin of error;
3. **TTFT keeps rising:** the slope of each ok measured request's TTFT (from its scheduled
   arrival) against that arrival time is positive by more than its margin of error.

Margins of error are the slope's standard error times Student's t at 99% (``CONFIDENCE``,
one-sided), as guidellm's over-saturation detector uses them. Successive samples of a
queue are correlated, so one slope alone would be significant too easily; the three signs
together are the verdict. Closed-loop levels cannot over-saturate (a stream waits for its
answer) and get none of this.

While a level runs (``load.stop_over_saturated``) the same signs are computed from what is
known so far: the arrivals due by now, the requests ended by now; the completions are
counted against the arrivals up to now less the median arrival-to-end time (those had
that long to end), not the whole window's. The level is stopped when four checks in a row,
half a second apart from 3 s into the measured window, say over-saturated (suites/serving/
saturation_watch.py, with how often that stops a level below the capacity).

How often a level is flagged, by its offered rate against the capacity: 200 levels each of
a simulated queue (4 slots of 0.25 s, Poisson arrivals, 7 s measured;
tests/unit/test_saturation.py). Near the capacity a 7 s window can hold more arrivals than the
capacity by chance, and then its queue does grow; a longer level tells them apart better.

| offered / capacity | 0.6 | 0.8 | 0.9 | 0.95 | 1.0 | 1.05 | 1.1 | 1.25 | 1.5 |
|---|---|---|---|---|---|---|---|---|---|
| flagged | 0% | 1% | 3% | 9% | 16.5% | 35% | 47% | 93.5% | 100% |
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.special import stdtrit

from moeperf.collectors.latency import NS_PER_S, per_request
from moeperf.collectors.saturation_records import (
    COMPLETION_SHORTFALL,
    CONFIDENCE,
    Saturation,
    Slope,
)

MIN_SAMPLES = 10  # fewer measured arrivals: no verdict


def slope(x: np.ndarray, y: np.ndarray) -> Slope:
    """Least-squares slope of ``y`` on ``x`` with its margin of error (module docstring)."""
    n = len(x)
    if n < 3 or np.ptp(x) == 0:  # no slope to speak of: not rising
        return Slope(0.0, 0.0, n)
    dx = x - x.mean()
    per = float(dx @ (y - y.mean()) / (dx @ dx))
    residuals = y - y.mean() - per * dx
    standard_error = float(np.sqrt(residuals @ residuals / (n - 2) / (dx @ dx)))
    return Slope(per, float(stdtrit(n - 2, CONFIDENCE)) * standard_error, n)


def saturation_of(level: pd.DataFrame, ttft_s: pd.Series) -> Saturation | None:
    """The signs of one open-loop level: ``level`` its request records (every phase),
    ``ttft_s`` the measured ok requests' TTFT, indexed as ``level``. None: fewer than
    ``MIN_SAMPLES`` measured arrivals, or all at one instant."""
    measured = level[level["phase"] == "measure"]
    timed = ttft_s.dropna()
    completed = level["status"] != "cancelled"  # cancelled by the harness: not served
    completions_s = level.loc[completed, "done_ns"].to_numpy() / NS_PER_S
    return signs(
        measured_arrivals_s=measured["intended_send_ns"].to_numpy() / NS_PER_S,
        arrivals_s=level["intended_send_ns"].to_numpy() / NS_PER_S,
        ends_s=level["done_ns"].to_numpy() / NS_PER_S,
        completions_s=completions_s,
        lags_s=(measured["done_ns"] - measured["intended_send_ns"]).to_numpy() / NS_PER_S,
        ttft_sent_s=level.loc[timed.index, "intended_send_ns"].to_numpy() / NS_PER_S,
        ttft_s=timed.to_numpy(dtype=float),
        # Nothing was served after the last completion: a level stopped early (load.
        # stop_over_saturated) is counted up to its stop, as its live check was.
        now_s=float(completions_s.max()) if len(completions_s) else None,
    )


def signs(
    *,
    measured_arrivals_s: np.ndarray,
    arrivals_s: np.ndarray,
    ends_s: np.ndarray,
    completions_s: np.ndarray,
    lags_s: np.ndarray,
    ttft_sent_s: np.ndarray,
    ttft_s: np.ndarray,
    now_s: float | None = None,
) -> Saturation | None:
    """The three signs (module docstring) from a level's times, in seconds: its measured
    arrivals, every arrival, every request's end, every completion (an end that was not a
    cancellation), the measured requests' arrival-to-end times, and the ok measured
    requests' arrival and TTFT. ``now_s``: the level is still running (load.
    stop_over_saturated), and only what has ended by then is known; the completions are
    then counted against the arrivals up to ``now_s`` less the median arrival-to-end time,
    whose requests had that long to end. None: fewer than ``MIN_SAMPLES`` measured
    arrivals, or too short a window."""
    if len(measured_arrivals_s) < MIN_SAMPLES:
        return None
    arrivals = np.sort(measured_arrivals_s)
    start, end = arrivals[0], arrivals[-1]
    if end <= start:
        return None
    scheduled = np.searchsorted(np.sort(arrivals_s), arrivals, side="right")
    ended = np.searchsorted(np.sort(ends_s), arrivals, side="right")
    in_flight = slope(arrivals, (scheduled - ended).astype(float))
    # The window's arrivals end one request's length later: completions are counted over
    # the window shifted by the measured requests' median time from arrival to end.
    lag_s = float(np.median(lags_s)) if len(lags_s) else float("inf")
    cut = end if now_s is None else min(end, now_s - lag_s)
    if cut <= start:
        return None
    window_s = cut - start
    done = (completions_s >= start + lag_s) & (completions_s <= cut + lag_s)
    completions = np.count_nonzero(done) / window_s
    ttft = slope(ttft_sent_s, ttft_s)
    arrivals_per_s = (np.searchsorted(arrivals, cut, side="right") - 1) / window_s
    short = completions < (1 - COMPLETION_SHORTFALL) * arrivals_per_s
    verdict = short and in_flight.rising and ttft.rising
    # Plain floats and bools: the summary is JSON.
    return Saturation(float(arrivals_per_s), float(completions), in_flight, ttft, bool(verdict))


def level_saturation(level: pd.DataFrame) -> Saturation | None:
    """``saturation_of`` one level's records, its TTFTs as collectors.latency defines them."""
    metrics = per_request(level[level["phase"] == "measure"])
    return saturation_of(level, metrics.loc[metrics["status"] == "ok", "ttft_s"])
