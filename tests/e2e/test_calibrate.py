"""``moeperf calibrate`` as a user runs it, and its self-check: a delay planted before
every send (``--plant-send-delay-ms``) must show on the send side, whole, and leave the
receive side as it was.

The self-check is a timing test (it reads measured wall-clock figures): the timing part.
The tolerance, 2 ms, is a tenth of the planted 20 ms and above the send side's whole p50
at 1 and 16 streams in the calibrations of 2026-12-07 after 0a2b16a (0.3 to 0.8 ms).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_process import moeperf

from moeperf.collectors.serving_records import MeasurementErrors, ServingSummary
from moeperf.collectors.store import RunStore

PLANTED_MS = 20.0
LEVEL = ("--levels", "4", "--duration-s", "3", "--output-tokens", "16")


def _errors(runs: Path) -> MeasurementErrors:
    summary = RunStore(runs).open("latest").summary()
    assert isinstance(summary, ServingSummary)
    errors = summary.scenarios["c=4"].harness_error_s
    assert errors is not None and errors.matched_requests > 0
    return errors


def _p50_ms(errors: MeasurementErrors, side: str) -> float:
    value = getattr(errors, side).value_at(0.5)
    assert value is not None, side
    return float(value) * 1e3


@pytest.mark.slow
@pytest.mark.timing
def test_calibrate_finds_a_planted_send_delay_on_the_send_side(tmp_path):
    plain = moeperf(tmp_path / "plain", "calibrate", *LEVEL)
    assert plain.returncode == 0, plain.stdout + plain.stderr
    assert "TTFT total p50" in plain.stdout and "send p50" in plain.stdout
    planted = moeperf(
        tmp_path / "planted", "calibrate", *LEVEL, "--plant-send-delay-ms", str(PLANTED_MS)
    )
    # The planted delay is the harness's own: the TTFT budget (1 ms) is not met.
    assert planted.returncode == 0, planted.stdout + planted.stderr
    assert "budget" in planted.stdout and "first not met at c=4" in planted.stdout

    before, after = _errors(tmp_path / "plain"), _errors(tmp_path / "planted")
    moved_ms = _p50_ms(after, "send") - _p50_ms(before, "send")
    assert PLANTED_MS - 2.0 <= moved_ms <= PLANTED_MS + 2.0, (moved_ms, before.send, after.send)
    receive_moved_ms = _p50_ms(after, "ttft") - _p50_ms(before, "ttft")
    assert abs(receive_moved_ms) <= 1.0, (before.ttft, after.ttft)
    total_moved_ms = _p50_ms(after, "ttft_total") - _p50_ms(before, "ttft_total")
    assert PLANTED_MS - 2.0 <= total_moved_ms <= PLANTED_MS + 2.0, total_moved_ms


def test_a_planted_delay_outside_calibration_is_refused(tmp_path):
    result = moeperf(
        tmp_path / "runs", "run", "default", "--set", "harness.planted_send_delay_s=0.01"
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "harness.planted_send_delay_s is calibration's self-check" in result.stderr
    assert not (tmp_path / "runs").exists() or not RunStore(tmp_path / "runs").run_ids()
    bad = moeperf(tmp_path / "runs", "calibrate", "--plant-send-delay-ms", "-3")
    assert bad.returncode == 2 and "--plant-send-delay-ms -3: expected 0 to 1000 ms" in bad.stderr
