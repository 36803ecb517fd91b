"""Training checkpoints on disk: model and optimizer state, the step, the data cursor.

Written to a temporary file and renamed, so a crash mid-write never leaves a checkpoint
that looks complete. Write and restore times are returned: OOM recovery costs them.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch


@dataclass(frozen=True)
class TrainState:
    step: int  # steps completed
    next_sample: int  # index of the next training sample (micro-batch) to draw


def save_checkpoint(
    path: Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    state: TrainState,
    rank: int | None = None,
) -> None:
    """Write ``model``, ``optimizer`` and ``state`` to ``path`` (and ``rank``, a shard's):
    to a temporary name, then renamed."""
    tmp = path.with_suffix(".tmp")
    payload: dict[str, Any] = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "step": state.step,
        "next_sample": state.next_sample,
    }
    if rank is not None:
        payload["rank"] = rank
    torch.save(payload, tmp)
    os.replace(tmp, path)


def load_checkpoint(
    path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer
) -> TrainState:
    """Load ``path`` into ``model`` and ``optimizer``; the state it was saved at."""
    # Read to host memory and copy into the existing tensors: after an OOM the device
    # has no room for a second copy of the weights or of the optimizer state.
    payload: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict(payload["model"])
    optimizer.state.clear()
    optimizer.load_state_dict(payload["optimizer"])
    return TrainState(payload["step"], payload["next_sample"])


class CheckpointStore:
    def __init__(self, directory: Path, keep: int = 2):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.keep = keep

    def save(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: TrainState
    ) -> float:
        """Write a checkpoint; seconds taken."""
        started = time.perf_counter()
        save_checkpoint(self.directory / f"step-{state.step:08d}.pt", model, optimizer, state)
        for old in self._paths()[: -self.keep]:
            old.unlink()
        return time.perf_counter() - started

    def latest(self) -> Path | None:
        paths = self._paths()
        return paths[-1] if paths else None

    def restore(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer
    ) -> tuple[TrainState, float]:
        """Load the latest checkpoint into ``model`` and ``optimizer``; its state and seconds."""
        started = time.perf_counter()
        path = self.latest()
        if path is None:
            raise FileNotFoundError(f"no checkpoint in {self.directory}")
        state = load_checkpoint(path, model, optimizer)
        return state, time.perf_counter() - started

    def _paths(self) -> list[Path]:
        return sorted(self.directory.glob("step-*.pt"))
