"""The CDF charts' log axes carry readable labels (issue 11, item 10).

Plotly's own log ticks read "4 5 6 7 ... 100 2 3"; the axes now carry explicit ticks at
1-2-5 steps, each label a full number with its unit.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from moeperf.reports.figures.cdf import cdf_curves, latency_cdf
from moeperf.reports.figures.log_axis import log_ticks

LABEL = re.compile(r"^\d{1,3}(,\d{3})*(\.\d+)? ms$")


def cdf_figure(ttft_s: np.ndarray):
    import pandas as pd

    frame = pd.DataFrame({"scenario": ["c=4"] * len(ttft_s), "ttft_s": ttft_s})
    return latency_cdf(cdf_curves(frame, "ttft_s"), "TTFT")


def test_a_cdf_axis_has_1_2_5_ticks_with_units():
    # TTFT from 4 ms to 300 ms: the range that used to read "4 5 6 7 ... 100 2 3".
    rng = np.random.default_rng(0)
    figure = cdf_figure(np.exp(rng.uniform(np.log(0.004), np.log(0.3), 2_000)))
    axis = figure.layout.xaxis
    assert axis.type == "log" and axis.tickmode == "array"
    assert list(axis.ticktext) == ["5 ms", "10 ms", "20 ms", "50 ms", "100 ms", "200 ms"]
    assert list(axis.tickvals) == [5, 10, 20, 50, 100, 200]
    assert all(LABEL.match(text) for text in axis.ticktext)


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [
        (0.01, 50_000, ["0.01", "0.1", "1", "10", "100", "1,000", "10,000"]),  # 7 decades
        (0.05, 0.3, ["0.05", "0.1", "0.2"]),
        (22, 118, ["30", "50", "100"]),  # 1-2-5 alone leaves two: 3 joins
        (10.2, 10.9, ["10.2", "10.4", "10.6", "10.8"]),  # a synthetic target's ITL
    ],
)
def test_every_range_gets_at_least_two_readable_labels_inside_it(low, high, expected):
    ticks = log_ticks(low, high, "ms")
    assert [label.removesuffix(" ms") for label in ticks.labels] == expected
    assert all(low <= v <= high for v in ticks.values)


def test_a_range_a_log_axis_cannot_draw_gets_no_ticks():
    assert log_ticks(0.0, 5.0, "ms").values == ()
    assert log_ticks(float("nan"), 5.0, "ms").values == ()
    figure = cdf_figure(np.zeros(5))  # all zero: nothing on a log axis
    assert figure.layout.xaxis.tickvals is None
