"""moeperf.suites.ingest: a real pytest-benchmark JSON file -> a "micro" run, one sample
per round."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from moeperf.collectors.micro_summary import MicroSummary
from moeperf.collectors.store import RunStore
from moeperf.suites.errors import UsageError
from moeperf.suites.ingest import (
    SAMPLE_MEANING,
    ingest_benchmark,
    ingest_command,
    read_benchmark_json,
)

BENCHMARKS = textwrap.dedent(
    """
    import time

    import pytest


    @pytest.mark.benchmark(group="tiny")
    def test_sleep(benchmark):
        # 7 rounds of 3 calls: each round's sample is its time per call (about 2 ms).
        benchmark.pedantic(time.sleep, args=(0.002,), rounds=7, iterations=3)


    def test_sum(benchmark):
        benchmark(sum, range(100))
    """
)
SLEEP = "bench_x.py::test_sleep"
SUM = "bench_x.py::test_sum"


@pytest.fixture(scope="module")
def produced(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """pytest-benchmark run for real: its --benchmark-json file and its --benchmark-save one."""
    root = tmp_path_factory.mktemp("bench")
    (root / "bench_x.py").write_text(BENCHMARKS)
    # Its own rootdir and config: nothing of this repository's pytest settings applies.
    (root / "pytest.ini").write_text("[pytest]\n")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "bench_x.py",
            "-p",
            "no:cacheprovider",
            "-q",
            "--benchmark-json=out.json",
            "--benchmark-max-time=0.05",
            # A saved file, without --benchmark-save-data: it has no per-round times.
            "--benchmark-save=saved",
            f"--benchmark-storage=file://{root / 'storage'}",
        ],
        cwd=root,
        # Not this run's PYTEST_XDIST_WORKER: pytest-benchmark reads it as "under xdist" and
        # saves nothing (the tests run across both cores, docs/development/tests.md).
        env={k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (saved,) = (root / "storage").rglob("*saved.json")
    return {"json": root / "out.json", "saved": saved, "root": root}


def _raw(path: Path) -> dict[str, dict]:
    return {b["fullname"]: b for b in json.loads(path.read_text())["benchmarks"]}


@pytest.mark.timing
def test_every_round_becomes_one_sample(produced, tmp_path):
    raw = _raw(produced["json"])
    store = RunStore(tmp_path / "runs")
    run_id = ingest_benchmark(produced["json"], store, name="tiny-micro")
    reader = store.open(run_id)
    assert reader.manifest.status == "complete"
    assert reader.manifest.suite == "micro"
    assert reader.manifest.spec_given["name"] == "tiny-micro"
    samples = reader.samples()
    assert set(samples["metric"]) == {SLEEP, SUM}
    for fullname, bench in raw.items():
        rows = samples[samples["metric"] == fullname]
        # Every round, in order, exactly as pytest-benchmark wrote it.
        assert rows["value"].tolist() == bench["stats"]["data"]
        assert len(rows) == bench["stats"]["rounds"]
        assert set(rows["unit"]) == {"s"}
        assert set(rows["direction"]) == {"lower"}
        assert set(rows["scenario"]) == {bench["group"] or ""}
    assert len(samples[samples["metric"] == SLEEP]) == 7
    # A sample is the time per call, not per round of 3 calls (which would be >= 6 ms).
    sleep = samples.loc[samples["metric"] == SLEEP, "value"]
    assert sleep.min() >= 0.002
    assert sleep.median() < 0.0045


@pytest.mark.timing
def test_summary_and_manifest(produced, tmp_path):
    raw = _raw(produced["json"])
    store = RunStore(tmp_path / "runs")
    reader = store.open(ingest_benchmark(produced["json"], store))
    summary = reader.summary()
    assert isinstance(summary, MicroSummary) and summary.SUITE == "micro"
    assert summary.sample == SAMPLE_MEANING
    for fullname, bench in raw.items():
        entry = summary.benchmarks[fullname]
        data = np.asarray(bench["stats"]["data"])
        assert entry.rounds.count == len(data)
        assert entry.median == pytest.approx(np.median(data))
        assert entry.p90 == pytest.approx(np.quantile(data, 0.9))
        assert entry.min == data.min()
        assert entry.iterations == bench["stats"]["iterations"]
        assert [q.q for q in entry.rounds.quantiles] == [0.5, 0.9, 0.99]
    assert summary.benchmarks[SLEEP].iterations == 3
    file = json.loads(produced["json"].read_text())
    target = reader.manifest.target
    assert target["machine_info"] == file["machine_info"]
    assert target["commit_info"] == file["commit_info"]
    assert reader.manifest.spec_given["name"] == "micro"
    assert reader.manifest.spec_resolved["benchmarks"][SLEEP]["rounds"] == 7


@pytest.mark.timing
def test_ingest_command_prints_a_table(produced, tmp_path):
    lines: list[str] = []
    assert ingest_command(str(produced["json"]), str(tmp_path / "runs"), None, lines.append) == 0
    text = "\n".join(lines)
    assert "ingested 2 benchmarks" in text
    assert SLEEP in text and SUM in text
    assert lines[-1].startswith("run: ")
    assert Path(lines[-1].removeprefix("run: "), "manifest.json").exists()


def _bad(tmp_path: Path, content: str | bytes) -> Path:
    path = tmp_path / "bad.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


def _one_benchmark(**stats) -> str:
    bench = {"group": None, "name": "t", "fullname": "b.py::t", "stats": stats}
    return json.dumps({"machine_info": {}, "commit_info": {}, "benchmarks": [bench]})


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file"),
        ("", "is empty; pytest-benchmark writes it only when benchmarks ran"),
        ("{not json", "not JSON"),
        ('{"results": []}', "not a pytest-benchmark file (no 'benchmarks' list)"),
        ("[1, 2]", "not a pytest-benchmark file"),
        ('{"benchmarks": []}', "holds no benchmarks"),
        ('{"benchmarks": [{"name": "x"}]}', "no 'fullname' and 'stats'"),
        (_one_benchmark(rounds=0, data=[]), "has no rounds"),
        (_one_benchmark(rounds=1, data=["fast"]), "round time 'fast' is not a finite number"),
        (_one_benchmark(rounds=1), "has no per-round times"),
        (b"\xff\xfe", "cannot be read"),
    ],
    ids=[
        "missing",
        "empty",
        "not-json",
        "no-benchmarks-key",
        "not-an-object",
        "no-benchmarks",
        "not-a-benchmark",
        "no-rounds",
        "bad-round",
        "no-data",
        "not-utf8",
    ],
)
@pytest.mark.timing
def test_bad_input_is_a_usage_error_and_creates_no_run(tmp_path, content, message):
    path = tmp_path / "missing.json" if content is None else _bad(tmp_path, content)
    store = RunStore(tmp_path / "runs")
    with pytest.raises(UsageError) as raised:
        ingest_benchmark(path, store)
    assert message in str(raised.value)
    assert str(path) in str(raised.value)
    assert store.run_ids() == []


@pytest.mark.timing
def test_saved_file_without_save_data_names_the_flag(produced, tmp_path):
    """--benchmark-save keeps no rounds unless --benchmark-save-data; --benchmark-json does."""
    store = RunStore(tmp_path / "runs")
    with pytest.raises(UsageError) as raised:
        ingest_benchmark(produced["saved"], store)
    assert "--benchmark-save-data" in str(raised.value)
    assert store.run_ids() == []
    assert all(b["stats"].get("data") for b in _raw(produced["json"]).values())


@pytest.mark.timing
def test_directory_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="is a directory"):
        read_benchmark_json(tmp_path)
