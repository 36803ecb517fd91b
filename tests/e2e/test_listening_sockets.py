"""Every port moeperf opens listens on 127.0.0.1 only: the harness's live /metrics, the
embedded synthetic target it starts, and the ranks of a distributed training job (gloo's
sockets; their rendezvous is a file, not torchrun's TCP store, which listens on every
interface). Read from the kernel (psutil) while each runs."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch

from moeperf.targets.model.config import MoEConfig
from moeperf.targets.training.distributed.launcher import launch
from moeperf.targets.training.distributed.layout import Layout
from moeperf.targets.training.distributed.rank_step import RankEvent, RankStep
from moeperf.targets.training.distributed.rank_trainer import DistConfig
from moeperf.targets.training.setup import TrainerConfig

REPO_ROOT = Path(__file__).resolve().parents[2]


def listening(processes: list[psutil.Process]) -> list[tuple[str, str, int]]:
    """(command, address, port) of every listening TCP socket of ``processes``."""
    found = []
    for process in processes:
        try:
            sockets = process.net_connections(kind="inet")
            command = " ".join(process.cmdline()[:4])
        except psutil.NoSuchProcess:
            continue
        found += [(command, s.laddr.ip, s.laddr.port) for s in sockets
                  if s.status == psutil.CONN_LISTEN]  # fmt: skip
    return found


def with_children(pid: int) -> list[psutil.Process]:
    parent = psutil.Process(pid)
    return [parent, *parent.children(recursive=True)]


@pytest.mark.slow
def test_a_serving_run_and_its_target_listen_on_loopback_only(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "moeperf.cli", "--runs-dir", str(tmp_path / "runs"),
               "run", "synthetic", "--set", "load.duration_s=20", "--set", "load.levels=[1]",
               "--set", "export.live_metrics=true"]  # fmt: skip
    with open(tmp_path / "out.txt", "w") as out:
        process = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=out, stderr=out)
    try:
        deadline = time.monotonic() + 60
        seen: list[tuple[str, str, int]] = []
        # Until both are up: the target (a child) and the harness's /metrics.
        while time.monotonic() < deadline and len({c for c, _, _ in seen}) < 2:
            assert process.poll() is None, (tmp_path / "out.txt").read_text()
            seen = listening(with_children(process.pid))
            time.sleep(0.2)
    finally:
        process.kill()
        process.wait()
    commands = {c for c, _, _ in seen}
    assert any("moeperf.cli" in c for c in commands), seen
    assert any("targets.synthetic" in c for c in commands), seen
    assert {address for _, address, _ in seen} == {"127.0.0.1"}, seen


@pytest.mark.slow
def test_a_distributed_jobs_ranks_listen_on_loopback_only(tmp_path):
    tokens = tmp_path / "tokens.pt"
    torch.save(torch.randint(0, 4096, (5_000,)), tokens)
    model = MoEConfig(hidden_size=64, expert_hidden_size=64, num_layers=2, num_heads=4,
                      num_kv_heads=2, num_experts=4, top_k=2, mtp_depth=0)  # fmt: skip
    config = TrainerConfig(
        model=model, init_from=None, seq_len=16, micro_batch_size=1, microbatches=2, steps=3,
        threads=1, token_stream_path=str(tokens),
    )  # fmt: skip
    seen: list[tuple[str, str, int]] = []

    def look(record: RankStep | RankEvent) -> None:
        if isinstance(record, RankStep) and not seen:  # the ranks are up and talking
            ranks = [p for p in psutil.Process().children(recursive=True)
                     if "distributed.worker" in " ".join(p.cmdline())]  # fmt: skip
            seen.extend(listening(ranks))

    result = launch(DistConfig(config, Layout(ep=2), str(tmp_path / "job")), on_record=look)
    assert result.completed
    assert seen, "no rank was listening"
    assert {address for _, address, _ in seen} == {"127.0.0.1"}, seen
