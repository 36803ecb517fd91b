"""Sharded checkpoints: every rank writes its own slice, a step's checkpoint counts only once
all of them are on disk.

``step-00000010/rank-00001.pt`` holds rank 1's model and optimizer state, written to a
temporary name and renamed (a rank killed mid-write leaves no file that looks whole). Once
every rank has written (a barrier), rank 0 marks the step ``COMPLETE`` the same way; a
restart reads the newest complete step, so a job killed between the shards and the mark
falls back one checkpoint rather than loading a mix of steps.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import torch

from moeperf.targets.training.checkpoint import TrainState, load_checkpoint, save_checkpoint

COMPLETE = "COMPLETE"


class ShardedCheckpoints:
    def __init__(self, directory: Path, rank: int, keep: int = 2):
        self.directory = Path(directory)
        self.rank = rank
        self.keep = keep
        self.directory.mkdir(parents=True, exist_ok=True)

    def write_shard(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: TrainState
    ) -> float:
        """Write this rank's shard of ``state``; seconds taken."""
        started = time.perf_counter()
        step_dir = self._step_dir(state.step)
        step_dir.mkdir(parents=True, exist_ok=True)
        path = step_dir / f"rank-{self.rank:05d}.pt"
        save_checkpoint(path, model, optimizer, state, rank=self.rank)
        return time.perf_counter() - started

    def mark_complete(self, step: int, world_size: int) -> None:
        """Rank 0, after a barrier: every shard of ``step`` is written; older ones beyond
        ``keep`` are removed."""
        step_dir = self._step_dir(step)
        shards = sorted(step_dir.glob("rank-*.pt"))
        if len(shards) != world_size:
            raise RuntimeError(f"{step_dir}: {len(shards)} shards written, {world_size} ranks")
        tmp = step_dir / f"{COMPLETE}.tmp"
        tmp.write_text(f"{world_size}\n")
        os.replace(tmp, step_dir / COMPLETE)
        for old in self.complete_steps()[: -self.keep]:
            shutil.rmtree(self._step_dir(old), ignore_errors=True)

    def complete_steps(self) -> list[int]:
        return sorted(
            int(d.name.split("-")[1])
            for d in self.directory.glob("step-*")
            if (d / COMPLETE).exists()
        )

    def latest(self) -> int | None:
        steps = self.complete_steps()
        return steps[-1] if steps else None

    def restore(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer
    ) -> tuple[TrainState, float]:
        """Load this rank's shard of the newest complete step; its state and seconds."""
        started = time.perf_counter()
        step = self.latest()
        if step is None:
            raise FileNotFoundError(f"no complete checkpoint in {self.directory}")
        path = self._step_dir(step) / f"rank-{self.rank:05d}.pt"
        return load_checkpoint(path, model, optimizer), time.perf_counter() - started

    def _step_dir(self, step: int) -> Path:
        return self.directory / f"step-{step:08d}"
