"""A training suite end to end through the CLI: a tiny OOM-rate spec (keep-all and adaptive
under calm and spiky routing, a budget just above keep-all's calm peak) stored as one run
of step records, summarized, and reported as a page.

The tiny model has wide experts (512) next to a narrow residual stream (64), so a spike
moves its peak: with skew_seed 2, samples 1 and 2 spike; keep-all's calm peak is ~78.9
MiB and a spiky step's ~80.2 MiB, so a budget of 1.008 x the calm peak lets calm steps
through and stops spiky ones.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest
from first_screen import assert_answer_on_first_screen

from moeperf.cli import main
from moeperf.collectors.store import RunStore
from moeperf.collectors.training_summary import TrainingSummary

TINY_OOM = """
suite = "training"
name = "tiny-oom"
kind = "oom_rate"

[trainer]
init_from = "none"
mtp = false
seq_len = 64
micro_batch_size = 2
microbatches = 2
steps = 3
pipeline_stages = 2
stage = 0
expert_parallel = 4
checkpoint_every = 2
skew_seed = 2
budget_ratio = 1.008
budget_calibration_steps = 1
threads = 1  # tiny matmuls: a second thread only waits, or spins when the host is busy

[trainer.model]
hidden_size = 64
num_heads = 4
num_kv_heads = 2
expert_hidden_size = 512

[matrix]
policies = ["keep-all", "adaptive"]
skews = ["calm", "spiky"]
"""
SCENARIOS = ["keep-all/calm", "keep-all/spiky", "adaptive/calm", "adaptive/spiky"]


@pytest.fixture(scope="module")
def tiny_oom(tmp_path_factory) -> tuple[str, Path]:
    """The tiny OOM suite run once (sequential order), its console output and runs dir: the
    suite's own test reads all of it, the interleaving one its spiky scenarios as the
    scenarios run alone."""
    spec = tmp_path_factory.mktemp("spec") / "tiny-oom.toml"
    spec.write_text(TINY_OOM)
    runs = tmp_path_factory.mktemp("runs")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):  # the CLI's console prints to sys.stdout
        assert main(["--runs-dir", str(runs), "run", str(spec)]) == 0
    return out.getvalue(), runs


@pytest.mark.slow
def test_tiny_oom_suite_stores_steps_summary_and_a_report(tiny_oom, tmp_path):
    printed, runs = tiny_oom
    out = " ".join(printed.split())
    assert "OOM rate" in out and "effective tok/s" in out

    reader = RunStore(runs).open("latest")
    assert reader.manifest.suite == "training" and reader.manifest.status == "complete"
    assert reader.manifest.target["peak_flops"]["source"] == "measured"
    assert not (reader.directory / "checkpoints").exists()  # removed after each scenario
    steps = reader.steps()
    assert list(dict.fromkeys(steps["scenario"])) == SCENARIOS
    assert (steps["start_ns"] >= 0).all() and (steps["end_ns"] > steps["start_ns"]).all()
    assert (steps["mfu"] > 0).all() and (steps["peak_memory_bytes"] > 0).all()
    assert len(steps["tokens_per_expert"].iloc[0]) == 4  # [layer][expert]

    summary = reader.summary()
    assert isinstance(summary, TrainingSummary)
    entries = summary.scenarios
    assert list(entries) == SCENARIOS
    for entry in entries.values():
        assert entry.steps == 3
        for field in (entry.oom_rate, entry.ooms, entry.step_attempts, entry.restarts,
                      entry.time_lost_s, entry.effective_tokens_per_s, entry.tokens_per_s,
                      entry.mfu_p50, entry.decide_s):  # fmt: skip
            assert field is not None, entry
    assert entries["keep-all/calm"].ooms == 0
    assert entries["keep-all/spiky"].ooms >= 1  # the spike crossed the budget
    oom_rate = entries["keep-all/spiky"].oom_rate
    assert oom_rate is not None and oom_rate > 0
    assert entries["adaptive/spiky"].ooms == 0  # it decided to fit
    budget = summary.budgets[""]
    assert budget.budget_bytes == int(1.008 * budget.calibration_peak_bytes)

    page = tmp_path / "report.html"
    assert main(["--runs-dir", str(runs), "report", reader.run_id, "--out", str(page)]) == 0
    html = page.read_text()
    assert_answer_on_first_screen(page, "training", tmp_path / "chromium")
    assert "keep-all/spiky" in html and "plotly" in html.lower()


@pytest.mark.slow
def test_interleaved_scenarios_measure_what_sequential_ones_do(tiny_oom, tmp_path):
    """One step of each scenario in turn, every trainer alive: the records cycle through
    the scenarios in time, and each scenario trains exactly as it does alone (the same
    losses, peaks, OOMs and skipped samples), its OOM recovery included.

    "Alone" is the tiny OOM suite's sequential run: its spiky scenarios are the ones run
    interleaved here (the same budget too: it is calibrated on keep-all/calm either way),
    and the calm ones trained between them only add state they must not share."""
    spec = tmp_path / "interleaved.toml"
    spec.write_text(
        TINY_OOM.replace('skews = ["calm", "spiky"]', 'skews = ["spiky"]\norder = "interleaved"')
    )
    assert main(["--runs-dir", str(tmp_path / "runs"), "run", str(spec)]) == 0
    results = {}
    for order, runs in (("sequential", tiny_oom[1]), ("interleaved", tmp_path / "runs")):
        reader = RunStore(runs).open("latest")
        results[order] = (reader.steps(), reader.summary())

    sequential, interleaved = results["sequential"][0], results["interleaved"][0]
    in_time = list(interleaved.sort_values("start_ns")["scenario"])
    assert in_time[:4] == ["keep-all/spiky", "adaptive/spiky"] * 2  # round by round
    names = ["keep-all/spiky", "adaptive/spiky"]
    alone_in_time = [n for n in sequential.sort_values("start_ns")["scenario"] if n in names]
    assert alone_in_time == sorted(alone_in_time, key=names.index)  # one after the other
    for name in names:
        alone = sequential[sequential["scenario"] == name]
        turn = interleaved[interleaved["scenario"] == name]
        assert list(turn["step"]) == list(alone["step"])
        assert list(turn["loss"]) == list(alone["loss"])  # bit for bit: no shared state
        assert list(turn["peak_memory_bytes"]) == list(alone["peak_memory_bytes"])
    seq_summary, int_summary = results["sequential"][1], results["interleaved"][1]
    assert isinstance(seq_summary, TrainingSummary) and isinstance(int_summary, TrainingSummary)
    assert set(int_summary.scenarios) == set(names)
    for name in names:
        entry = seq_summary.scenarios[name]
        other = int_summary.scenarios[name]
        assert (other.ooms, other.steps, list(other.skipped_samples)) == (
            entry.ooms, entry.steps, list(entry.skipped_samples)
        )  # fmt: skip
    spiky = int_summary.scenarios["keep-all/spiky"]
    assert spiky.ooms >= 1  # recovery ran while interleaved
    # The work an OOM loses is the job's own: never the other scenario's steps in between,
    # so it fits in the scenario's own wall time (tokens / effective tokens per second).
    assert spiky.time_lost_s is not None and spiky.effective_tokens_per_s
    assert spiky.time_lost_s <= spiky.tokens / spiky.effective_tokens_per_s
