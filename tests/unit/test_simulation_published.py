"""The published-runs spec (training-sim-published) and its calibration: rows traced to the
shipped table of sources, at most a third of them fitted on, the fitter recovering a
constant it is given, and the simulator's FLOPs per token against the tables' own
TFLOP/s column (the ground truth the published MFUs rest on)."""

from __future__ import annotations

import csv
import dataclasses

import pytest

from moeperf.specs import load_spec
from moeperf.suites.errors import SpecError
from moeperf.suites.simulation.calibrate import (
    accuracy,
    configured,
    fit,
    simulated_metric,
)
from moeperf.suites.simulation.spec import CalibrationSettings
from moeperf.suites.spec_files import SPEC_DIR
from moeperf.targets.cluster_sim.flops import training_flops_per_token

ROWS_CSV = SPEC_DIR / "published" / "moe-pretraining-rows.csv"


def _table() -> dict[tuple[str, int], dict[str, str]]:
    with ROWS_CSV.open(newline="") as fh:
        return {(r["file"], int(r["line"])): r for r in csv.DictReader(fh)}


def _row_of(source: str, table: dict[tuple[str, int], dict[str, str]]) -> dict[str, str] | None:
    """The table row a spec's ``source`` ("owner/repo file:line") names, if it is one."""
    location = source.split(" ")[1] if " " in source else ""
    file, _, line = location.partition(":")
    return table.get((file, int(line))) if line.isdigit() else None


def test_every_row_is_traced_to_the_table_and_a_third_at_most_is_fitted():
    spec = load_spec("training-sim-published").simulation
    table = _table()
    assert len(table) == 197
    roles = [r.role for r in spec.reproduce]
    assert set(roles) == {"calibration", "validation"}
    assert 3 * roles.count("calibration") <= len(roles)
    for row in spec.reproduce:
        found = _row_of(row.source, table)
        if row.source.startswith("arXiv"):  # DeepSeek-V3's own, derived in the spec
            continue
        assert found is not None, row.name
        assert float(found["tokens_per_s_per_gpu"].split()[0]) == row.published, row.name
        assert row.skew == "none"  # both tables force-balance routing
    for entry in spec.not_taken:
        found = _row_of(entry.source, table)
        assert found is not None and entry.reason, entry.name
        assert float(found["tokens_per_s_per_gpu"].split()[0]) == entry.published
    # Every configuration is either taken or listed, none twice.
    sources = [r.source for r in spec.reproduce] + [n.source for n in spec.not_taken]
    assert len(sources) == len(set(sources))


def test_the_tables_tflops_are_their_tokens_times_the_simulators_flops():
    """tokens/s/GPU x FLOPs/token = model TFLOP/s/GPU, within 1.5%, for every taken row that
    reports both: the FLOP model counts what NVIDIA's tables count (MTP included where the
    run trained it, attention causal). The tables' own ratio varies by 1.3% between rows
    of one model (Qwen3-30B-A3B: 22.8 GFLOP/token on B200 26.04.01, 23.1 on GB200 26.08),
    their rounding; ours is 23.1."""
    spec = load_spec("training-sim-published").simulation
    table = _table()
    checked = 0
    for row in spec.reproduce:
        found = _row_of(row.source, table)
        if found is None or not found["model_tflops_per_gpu"]:
            continue
        tflops = float(found["model_tflops_per_gpu"].split()[0])
        flops = training_flops_per_token(row.config().model)
        assert row.published * flops / 1e12 == pytest.approx(tflops, rel=0.015), row.name
        checked += 1
    assert checked >= 12


def test_a_calibration_of_more_than_a_third_of_the_rows_is_refused(tmp_path):
    spec = (SPEC_DIR / "training-sim-published.toml").read_text()
    first_validation = 'role = "validation"'
    too_many = spec.replace(first_validation, 'role = "calibration"', 2)
    path = tmp_path / "published.toml"
    path.write_text(too_many)
    with pytest.raises(SpecError, match="at most a third of the rows may fit the constants"):
        load_spec(str(path))


def test_the_fit_recovers_an_efficiency_it_is_given():
    """A row whose 'published' figure is the simulator's own at GEMM efficiency 0.7 and FP8
    efficiency 0.45: the fit finds both back."""
    spec = load_spec("training-sim-published").simulation
    bf16 = next(r for r in spec.reproduce if r.precision == "bf16" and r.devices <= 256)
    fp8 = next(r for r in spec.reproduce if r.precision == "fp8" and r.devices <= 256)
    truth = {"gemm_efficiency": 0.7, "fp8_gemm_efficiency": 0.45}
    rows = []
    for row in (bf16, fp8):
        value = simulated_metric(row, configured(row, truth), iterations=2)
        assert value is not None
        rows.append(row.model_copy(update={"published": value}))
    found = fit(rows, CalibrationSettings(fit=list(truth)), lambda _: None)
    assert found.constants == pytest.approx(truth, abs=0.01)
    assert found.rms_log_error < 1e-3


def test_accuracy_counts_an_oom_row_as_a_complete_miss():
    from moeperf.collectors.simulation_summary import Reproduction

    base = Reproduction("a", "m", "h100", 8, "", "keep-all", "tokens/s/GPU", 100.0, 110.0, "s",
                        role="validation")  # fmt: skip
    rows = [base, dataclasses.replace(base, name="b", simulated=None),
            dataclasses.replace(base, name="c", simulated=95.0, role="calibration")]  # fmt: skip
    found = accuracy(rows)
    assert found is not None
    assert (found.rows, found.within_tolerance, found.worst, found.worst_error) == (2, 1, "b", -1)
    assert found.median_abs_error == pytest.approx(0.55)
