"""How long a fit probe lasts (suites/serving/sweep_fit.py): at least ``probe_s``, and
1.5 x the time its c prompts take to prefill one after another when that is longer, so a
probe cannot end before its prompts could have filled the cache."""

from __future__ import annotations

import pytest

from moeperf.suites.serving.mode_spec import FitSpec
from moeperf.suites.serving.sweep_fit import probe_duration_s


def test_a_probe_lasts_as_long_as_its_prompts_take_to_prefill():
    fit = FitSpec(probe_s=4.0)
    # 4,064-token prompts prefilled in 2.66 s alone: 3 of them, one after another, 7.98 s,
    # x 1.5 = 11.97 s; 2 of them 7.98 s; both longer than the 4 s floor.
    assert probe_duration_s(fit, 3, 2.66) == pytest.approx(11.97)
    assert probe_duration_s(fit, 2, 2.66) == pytest.approx(7.98)
    # 2,040 tokens in 0.87 s: 2 streams need 2.61 s, under the floor, which holds.
    assert probe_duration_s(fit, 2, 0.87) == 4.0
    # No single-stream TTFT measured (no request got a token): the spec's probe_s.
    assert probe_duration_s(fit, 8, None) == 4.0
