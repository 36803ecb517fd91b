"""The harness against the synthetic target over loopback, checked against its write times."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from typing import Any

import aiohttp
import numpy as np
import pytest

from moeperf.collectors.errors import MoeperfUsageError
from moeperf.collectors.latency import itl_samples_s, per_request
from moeperf.collectors.store import RunStore
from moeperf.reports.terminal.harness_error import harness_error_line
from moeperf.suites.serving.embedded.process import running_target
from moeperf.suites.serving.preflight import TargetUnreachable
from moeperf.suites.serving.runner import run_serving
from moeperf.suites.serving.spec import ServingSpec

pytestmark = pytest.mark.slow


def spec(**sections: dict[str, Any]) -> ServingSpec:
    data: dict[str, Any] = {
        "name": "test",
        "workload": {
            "input_tokens": {"mean": 16},
            "output_tokens": {"mean": 12},
            "num_prompts": 32,
        },
        "load": {"levels": [1, 8], "duration_s": 2.5, "warmup_s": 0.5, "cooldown_s": 0.0},
    }
    for key, value in sections.items():
        data[key] = {**data.get(key, {}), **value}
    return ServingSpec.model_validate(data)


async def ground_truth(url: str, ids: list[str]) -> dict:
    async with (
        aiohttp.ClientSession() as session,
        session.post(url + "/ground_truth/query", json={"ids": ids}) as answer,
    ):
        body = await answer.json()
    assert body["missing"] == []
    return body["records"]


def run(tmp_path, s: ServingSpec):
    store = RunStore(tmp_path / "runs")
    run_id = run_serving(s, s.model_dump(mode="json"), store)
    return store.open(run_id)


@pytest.mark.timing
def test_sweep_measures_what_the_server_wrote(tmp_path):
    config = {"ttft_s": 0.05, "itl_s": 0.01, "tokens_per_chunk": 2}
    with running_target("moeperf.targets.synthetic", config) as url:
        reader = run(tmp_path, spec(target={"kind": "url", "url": url}))
        requests = reader.requests()
        truth = asyncio.run(ground_truth(url, list(requests["server_request_id"].dropna())))
    assert reader.manifest.status in ("complete", "invalid")
    assert set(requests["scenario"]) == {"c=1", "c=8"}
    measured = requests[(requests["phase"] == "measure") & (requests["status"] == "ok")]
    assert len(measured) >= 8
    anchor = reader.manifest.anchor_monotonic_ns
    first_errors_ms, gap_errors_ms = [], []
    for _, row in measured.iterrows():
        server = truth[row["server_request_id"]]
        tokens = np.asarray(row["chunk_tokens"])
        arrivals = anchor + np.asarray(row["chunk_ns"])[tokens > 0]
        writes = np.asarray(server["chunk_write_ns"])
        # Same chunks, same tokens per chunk (2, as the server was told), usage as source.
        assert list(tokens[tokens > 0]) == server["chunk_tokens"] == [2] * 6
        assert row["chunk_tokens_source"] == "usage_stats"
        assert row["output_tokens"] == 12
        # Causality on one clock: nothing arrives before it was written.
        assert np.all(arrivals >= writes)
        first_errors_ms.append((arrivals[0] - writes[0]) / 1e6)
        gap_errors_ms.extend(np.diff(arrivals - writes) / 1e6)
        # TTFT is measured from the intended send, which precedes the server's receipt.
        assert anchor + row["intended_send_ns"] <= server["received_ns"]
    # Loose sanity bounds: these check the wiring, `moeperf calibrate` measures precision.
    assert np.median(first_errors_ms) < 20
    assert np.median(np.abs(gap_errors_ms)) < 5
    # ITL divides each 2-token gap over its tokens: about itl_s per token, not 2 x itl_s.
    itl = itl_samples_s(measured)["itl_s"]
    assert len(itl) == len(measured) * 10
    assert 0.009 <= np.median(itl) < 0.015
    assert (per_request(measured)["ttft_s"] >= 0.05).all()
    # The runner's own ground-truth summary is only for the embedded target.
    assert reader.summary().scenarios["c=8"].harness_error_s is None
    assert harness_error_line("c=8", reader.summary().scenarios["c=8"]) is None


def test_embedded_target_reports_harness_error(tmp_path):
    reader = run(tmp_path, spec(load={"levels": [4], "duration_s": 2.0}))
    entry = reader.summary().scenarios["c=4"]
    errors = entry.harness_error_s
    assert errors.matched_requests == entry.ok > 0
    assert errors.unmatched_requests == 0
    assert errors.ttft.count == entry.ok
    # every chunk arrives after it was written
    assert errors.chunk.value_at(0.5) >= 0
    # The send side: every request was received after its intended send; the total is
    # the two sides request by request, so its mean is theirs, added (E2E likewise).
    for side in (errors.send, errors.ttft_total, errors.e2e_receive, errors.e2e_total):
        assert side.count == entry.ok
    assert (errors.send.value_at(0.5) or 0.0) > 0
    assert errors.ttft_total.mean == pytest.approx(errors.send.mean + errors.ttft.mean)
    assert errors.e2e_total.mean == pytest.approx(errors.send.mean + errors.e2e_receive.mean)
    # runs show --verbose says the same figures.
    line = harness_error_line("c=4", entry)
    assert line is not None
    assert f"TTFT total p50 {(errors.ttft_total.value_at(0.5) or 0) * 1e3:+.2f} ms" in line
    assert f"send p50 {(errors.send.value_at(0.5) or 0) * 1e3:+.2f} ms" in line
    assert reader.manifest.target["simulated"] is True
    assert any("synthetic" in note for note in reader.manifest.notes)
    # Each request's errors are stored beside it (the gate's samples): the same figures.
    stored = reader.harness_errors()
    measured = reader.requests()
    measured = measured[(measured["phase"] == "measure") & (measured["status"] == "ok")]
    assert sorted(stored["request_id"]) == sorted(measured["request_id"])
    assert set(stored["scenario"]) == {"c=4"}
    assert stored["ttft_total_s"].mean() == pytest.approx(errors.ttft_total.mean)
    assert stored["send_s"].mean() == pytest.approx(errors.send.mean)
    total = stored["send_s"] + stored["receive_s"]
    assert stored["ttft_total_s"].to_numpy() == pytest.approx(total.to_numpy())


def test_faults_become_failed_requests_and_the_run_goes_on(tmp_path):
    synthetic = {
        "error_rate": 0.2,
        "malformed_rate": 0.15,
        "truncate_rate": 0.15,
        "stall_rate": 0.15,
        "stall_s": 3.0,
        "itl_s": 0.002,
        "ttft_s": 0.01,
    }
    reader = run(
        tmp_path,
        spec(
            target={"synthetic": synthetic},
            load={"levels": [8], "duration_s": 3.0, "warmup_s": 0.2, "drain_timeout_s": 3.0},
            harness={"stall_timeout_s": 0.5},
        ),
    )
    entry = reader.summary().scenarios["c=8"]
    # 65% of requests get a fault: more than half failed, so the level failed, types first.
    assert entry.status == "failed"
    assert reader.manifest.status == "failed"
    assert entry.ok > 0
    assert set(entry.error_types) >= {
        "http_5xx",
        "malformed_chunk",
        "stream_truncated",
        "stall_timeout",
    }
    assert entry.errors == sum(entry.error_types.values())
    requests = reader.requests()
    http = requests[requests["error_type"] == "http_5xx"]
    assert (http["http_status"] == 500).all()
    # Failures are in goodput's denominator.
    assert entry.goodput_ratio <= entry.ok / entry.requests


def dataset_workload(tmp_path) -> dict[str, Any]:
    """Prompts from a file and no tokenizer: nothing asks the target before the load."""
    dataset = tmp_path / "prompts.jsonl"
    dataset.write_text(
        "\n".join(json.dumps({"prompt": f"hello {i}", "output_tokens": 4}) for i in range(5))
    )
    return {"kind": "dataset", "dataset_path": str(dataset), "tokenizer": "", "num_prompts": 5}


NO_EXPORT = {"live_metrics": False, "scrape_target": False}


def test_an_unreachable_target_is_refused_before_any_load(tmp_path, unused_tcp_port):
    url = f"http://127.0.0.1:{unused_tcp_port}"
    store = RunStore(tmp_path / "runs")
    s = spec(target={"kind": "url", "url": url}, workload=dataset_workload(tmp_path))
    with pytest.raises(TargetUnreachable) as refused:
        run_serving(s, s.model_dump(mode="json"), store)
    message = str(refused.value)
    assert f"GET {url}/v1/models: connection refused" in message
    assert isinstance(refused.value, MoeperfUsageError)  # exit 2
    # Nothing was claimed: no run directory, so no run that looks measured.
    assert store.run_ids() == []


class AnswersOnce:
    """Answers GET /v1/models once (the pre-flight), then closes its port: every later
    connect is refused, as when a server dies as the load starts."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._thread = threading.Thread(target=self._answer_one, daemon=True)
        self._thread.start()

    def _answer_one(self) -> None:
        connection, _ = self._listener.accept()
        with connection:
            connection.recv(65536)
            body = json.dumps({"object": "list", "data": [{"id": "served-model"}]}).encode()
            head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            head += f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            connection.sendall(head.encode() + body)
        self._listener.close()

    def join(self) -> None:
        self._thread.join(timeout=10)


def test_a_target_that_refuses_connections_fails_its_level_and_is_backed_off(tmp_path):
    target = AnswersOnce()
    reader = run(
        tmp_path,
        spec(
            # Unprobed: the target is gone before a probe could ask it anything.
            target={"kind": "url", "url": target.url, "probe": False},
            workload=dataset_workload(tmp_path),
            load={"levels": [8], "duration_s": 2.0, "warmup_s": 0.0, "workers": 1},
            export=NO_EXPORT,
        ),
    )
    target.join()
    # The model is the one the target reported, not a placeholder.
    assert reader.manifest.target["model"] == "served-model"
    entry = reader.summary().scenarios["c=8"]
    # The target's failure, error type first; not called client-bound.
    assert entry.status == "failed"
    assert entry.status_reason.startswith("connect_error ")
    assert entry.client_bottleneck == ()
    assert reader.manifest.status == "failed"
    assert "levels failed: c=8 (connect_error" in reader.manifest.status_reason
    # Bounded attempts: one per stream at the start, then one probe at a time after a
    # wait doubling from 10 ms to 1 s (about 8 in 2 s). Spinning made thousands.
    requests = reader.requests()
    attempts = int((requests["error_type"] == "connect_error").sum())
    assert 8 <= attempts <= 40, attempts
    assert set(requests["status"]) <= {"error", "cancelled"}
    # Requests held back keep their intended send time: the wait is queueing delay.
    sent = requests[requests["error_type"] == "connect_error"]
    assert (sent["send_ns"] >= sent["intended_send_ns"]).all()
    assert (sent["send_ns"] - sent["intended_send_ns"]).max() > 50_000_000


def test_a_level_whose_requests_all_fail_is_a_failed_level(tmp_path):
    reader = run(
        tmp_path,
        spec(
            target={"synthetic": {"error_rate": 1.0}},
            load={"levels": [2], "duration_s": 1.5, "warmup_s": 0.2},
            export=NO_EXPORT,
        ),
    )
    entry = reader.summary().scenarios["c=2"]
    assert entry.ok == 0 and entry.errors == entry.requests > 0
    assert entry.status == "failed"
    assert entry.status_reason == (
        f"http_5xx {entry.errors}: {entry.errors} of {entry.requests} measured requests failed"
    )
    assert reader.manifest.status == "failed"
    assert reader.manifest.status_reason.startswith("levels failed: c=2 (http_5xx ")


@pytest.mark.timing
def test_max_requests_alone_bounds_a_level(tmp_path):
    # No duration_s at all (spec() would give one).
    data = spec().model_dump(mode="json", include={"name", "workload"})
    # The bound, not the client's validity, is the subject: on 2 busy cores a worker's loop
    # lag p99 passed 2 ms and the run was client-bound, not complete.
    lenient = {"max_loop_lag_p99_s": 1.0, "max_cpu_fraction": 1.0}
    s = ServingSpec.model_validate(
        {**data, "harness": lenient,
         "load": {"levels": [1, 3], "max_requests": 7, "warmup_s": 0.0}}
    )  # fmt: skip
    assert s.load.duration_s is None and s.load.cooldown_s == 0
    reader = run(tmp_path, s)
    requests = reader.requests()
    assert requests.groupby("scenario").size().to_dict() == {"c=1": 7, "c=3": 7}
    assert set(requests["status"]) == {"ok"}
    assert reader.manifest.status == "complete", reader.manifest.status_reason
    assert reader.manifest.spec_resolved["load"]["duration_s"] is None
    assert any("until its 7 requests were done" in note for note in reader.manifest.notes)
    entry = reader.summary().scenarios["c=3"]
    assert (entry.requests, entry.ok, entry.status) == (7, 7, "ok")


def test_a_ramp_spreads_the_streams_first_sends_over_two_workers(tmp_path):
    # 8 streams over a 0.4 s ramp on 2 workers: the k-th stream's first send is k x 50 ms
    # after the level's start, whichever worker it is on, and never before. Each request
    # takes over 0.5 s, so the level's first 8 sends are the 8 streams' first. Only lower
    # bounds are read (a busy host makes a send later, never earlier), so the test is safe
    # beside a neighbour; the exact offsets are the plan's (test_prompt_pools.py).
    s = spec(
        load={"levels": [8], "duration_s": 1.5, "warmup_s": 0.5, "ramp_s": 0.4, "workers": 2},
        target={"synthetic": {"ttft_s": 0.5, "itl_s": 0.005}},
    )
    requests = run(tmp_path, s).requests().sort_values("intended_send_ns")
    firsts = requests.head(8)
    assert set(firsts["worker"]) == {0, 1}
    # The first stream starts at the level's start (late only if the loop stalled right
    # then; 50 ms allowed); stream k no earlier than k x 50 ms after it, less that
    # lateness. Without the ramp all eight start within milliseconds of each other.
    firsts_s = (firsts["intended_send_ns"].to_numpy() - firsts["intended_send_ns"].min()) / 1e9
    late_s = 0.05
    assert all(firsts_s[k] >= k * 0.05 - late_s for k in range(8)), firsts_s
    assert (requests["send_ns"] >= requests["intended_send_ns"]).all()


def test_a_level_goes_on_through_the_prompts_where_the_last_one_stopped(tmp_path):
    # A level that replayed the prompts its predecessor had just sent would be served from
    # a prefix cache. Prompts of random lengths: the server's prompt_tokens tell them apart.
    s = ServingSpec.model_validate(
        {
            "name": "test",
            "workload": {
                "input_tokens": {"dist": "uniform", "mean": 64, "spread": 48},
                "output_tokens": {"mean": 4},
                "num_prompts": 64,
            },
            "load": {"levels": [1, 2], "max_requests": 12, "warmup_s": 0.0},
        }
    )
    requests = run(tmp_path, s).requests().sort_values("send_ns")
    first = requests[requests["scenario"] == "c=1"]
    second = requests[
        (requests["scenario"] == "c=2") & (requests["worker"] == first["worker"].iloc[0])
    ]
    lengths = [list(level["prompt_tokens"]) for level in (first, second)]
    assert len(lengths[0]) == 12 and len(lengths[1]) >= 4
    # The same worker's next level starts after its last prompt, not at its first.
    assert lengths[1][:4] != lengths[0][:4], lengths


def test_open_loop_poisson_keeps_its_schedule(tmp_path):
    reader = run(
        tmp_path,
        spec(
            load={"mode": "poisson", "levels": [40], "duration_s": 3.0, "warmup_s": 0.5, "seed": 5}
        ),
    )
    requests = reader.requests()
    assert set(requests["scenario"]) == {"rate=40"}
    # 120 expected arrivals; 4 sigma is about 44.
    assert 76 <= len(requests) <= 164
    intended = np.sort(requests["intended_send_ns"].to_numpy())
    assert intended[-1] - intended[0] < 3.0e9
    queue_delay_s = (requests["send_ns"] - requests["intended_send_ns"]) / 1e9
    assert (queue_delay_s >= 0).all()
    harness = reader.summary().scenarios["rate=40"].harness[0]
    # Every request sent is recorded. An arrival the worker fell behind on past the window
    # is offered and never sent, and counted so (the achieved-rate check reads it): in a
    # CI run beside the other worker a 317 ms loop stall left 7 of 117 unsent.
    assert harness.sent == len(requests) and harness.offered >= harness.sent


def test_tokens_per_chunk_from_the_tokenizer_when_the_server_does_not_say(tmp_path):
    reader = run(
        tmp_path,
        spec(
            target={"continuous_usage": False, "synthetic": {"tokens_per_chunk": 3}},
            load={"levels": [2], "duration_s": 1.5, "warmup_s": 0.2},
        ),
    )
    requests = reader.requests()
    ok = requests[requests["status"] == "ok"]
    assert len(ok) > 0
    # Every ok record was amended after the level (the server's tokenizer's counts):
    # one row per request, and the summary counted each once.
    assert requests["request_id"].is_unique
    measured = requests[requests["phase"] == "measure"]
    assert reader.summary().scenarios["c=2"].requests == len(measured)
    assert set(ok["chunk_tokens_source"]) == {"server_tokenize"}
    for _, row in ok.iterrows():
        assert [n for n in row["chunk_tokens"] if n] == [3, 3, 3, 3]
        # Server usage and the client's count agree: no discrepancy.
        assert row["client_output_tokens"] == row["output_tokens"] == 12
