"""``moeperf run training-sim-published`` through the CLI: the calibration is fitted and
said, every published row is simulated with its role and recipe, the validation rows'
accuracy is computed from their errors, and the rows not taken reach the report with their
reasons."""

from __future__ import annotations

import pytest
from first_screen import assert_answer_on_first_screen

from moeperf.cli import main
from moeperf.collectors.simulation_summary import SimulationSummary
from moeperf.collectors.store import RunStore
from moeperf.specs import load_spec


@pytest.mark.slow  # about 20 s: the fit simulates its rows some 80 times
def test_the_published_runs_spec_fits_validates_and_lists_what_it_cannot_take(tmp_path, capsys):
    runs = tmp_path / "runs"
    assert main(["--runs-dir", str(runs), "run", "training-sim-published"]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    reader = RunStore(runs).open("latest")
    summary = reader.summary()
    assert isinstance(summary, SimulationSummary)
    assert summary.calibration is not None and summary.accuracy is not None
    assert sorted(summary.calibration.constants) == [
        "comm_efficiency",
        "fp8_gemm_efficiency",
        "gemm_efficiency",
    ]
    # Each fitted constant moves its calibration rows (it is identified by them).
    assert summary.calibration.unidentified() == [] and summary.calibration.at_bound == []
    assert summary.calibration.rows == [r.name for r in summary.reproductions
                                        if r.role == "calibration"]  # fmt: skip
    held_out = [r for r in summary.reproductions if r.role == "validation"]
    assert summary.accuracy.rows == len(held_out) >= 2 * len(summary.calibration.rows)
    within = sum(r.error is not None and abs(r.error) <= 0.15 for r in held_out)
    assert summary.accuracy.within_tolerance == within
    assert all(r.recipe for r in summary.reproductions)
    listed = load_spec("training-sim-published").simulation.not_taken
    assert len(summary.not_taken) == len(listed) >= 80 and all(n.reason for n in summary.not_taken)
    assert "calibration: gemm_efficiency" in printed and "validation: " in printed
    assert f"not taken: {len(listed)} configurations" in printed
    assert reader.steps()["simulated"].all()

    page = tmp_path / "report.html"
    assert main(["--runs-dir", str(runs), "report", reader.run_id, "--out", str(page)]) == 0
    html = page.read_text()
    assert_answer_on_first_screen(page, "simulation", tmp_path / "chromium")
    assert "Published rows the simulator cannot take" in html
    assert "hybrid Mamba-Transformer MoE" in html
    assert "every figure is the cluster simulator&#x27;s, none measured" in html or (
        "every figure is the cluster simulator's, none measured" in html
    )
    assert "latencies are configured" not in html  # the synthetic target's wording
