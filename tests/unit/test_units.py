import math

from moeperf.collectors.units import ms_text, to_ms


def test_seconds_become_milliseconds_and_unknown_stays_unknown():
    assert to_ms(0.0125) == 12.5
    assert to_ms(None) is None
    assert ms_text(0.0125) == "12.50"
    assert ms_text(0.0125, decimals=0) == "12"
    assert ms_text(None) == "-"
    assert ms_text(math.nan) == "-"
    assert ms_text(math.inf) == "-"
