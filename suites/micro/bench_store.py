"""The parent process's per-request work: storing a record and exporting it live.

Both take a finished 256-token request (``micro_inputs.finished_record``). Rounds are fixed
(``pedantic``) rather than calibrated: every stored record grows the run's JSONL by about
4 KB, and a calibrated second of appends would write a hundred megabytes.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from micro_inputs import finished_record

from moeperf.collectors.export.live_export import LiveExporter
from moeperf.collectors.store import RunStore
from moeperf.collectors.summary import Slo


@pytest.mark.benchmark(group="parent")
def test_append_request(benchmark, tmp_path: Path) -> None:
    """``RunWriter.append_request``: to_dict, JSON, write and flush, once per record."""
    record = finished_record()
    run = RunStore(tmp_path).create("micro-store")
    try:
        benchmark.pedantic(
            run.append_request, args=(record,), rounds=400, iterations=5, warmup_rounds=20
        )
    finally:
        run.abort("benchmark finished")
    assert len(run.directory.joinpath("requests.parquet").read_bytes()) > 0


@pytest.mark.benchmark(group="parent")
def test_observe_request(benchmark) -> None:
    """``LiveExporter.observe_request``: latencies, histograms (ITL binned per request)."""
    template = finished_record()
    # observe_request counts each request id once, so every call gets a new one.
    records = iter([dataclasses.replace(template, request_id=f"req-{i}") for i in range(3_000)])
    exporter = LiveExporter("nightly", "synthetic", slo=Slo(ttft_s=0.2, tpot_s=0.02))
    benchmark.pedantic(
        exporter.observe_request,
        setup=lambda: ((next(records),), {}),
        rounds=2_000,
        warmup_rounds=50,
    )
    labels = {"suite": "nightly", "target": "synthetic", "scenario": "c=32", "status": "ok"}
    assert exporter.registry.get_sample_value("moeperf_requests_total", labels) == 2_050
