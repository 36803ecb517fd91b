"""Routing skew: per-micro-batch target loads for the MoE router, seeded or replayed.

Seed 000 ("BaGuaLu-2", CONTEXT.md "Training"): long-run load imbalance is held under ~1.2x,
but in ~2.9% of iterations a micro-batch sends so many tokens to a few experts that the local
load jumps 2.6x or more. A profile turns that into a target for micro-batch ``m``: for every
layer, the share of the token-slots (N tokens x top_k) each expert should receive.
``skew_fit`` then fits a router-logit bias so the real routing hits it, the way Megatron's
``moe_router_force_biased`` forces skew.

    none    the model's own routing, untouched (no target, zero bias)
    calm    per micro-batch and layer, one hot expert at max/mean = 1 + LogNormal(ln 0.10, 0.5),
            chosen at random; the others share the rest equally
    spiky   calm, plus in 2.9% of micro-batches a spike: every layer's hot expert at 2.6x mean
    replay  tokens per expert per layer from a JSONL file, one micro-batch a line, looped

Targets are a pure function of (seed, micro-batch): a step replayed after an OOM restart sees
the same routing. Draws use ``random.Random`` seeded with a string and only its ``random()``,
the part of the module Python promises to keep stable across versions.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist
from typing import Protocol, TypeGuard

import torch
from torch import Tensor

from moeperf.targets.model.config import MoEConfig

# Calm: the hot expert's load over the mean, 1 + X with X log-normal. Median excess 0.10 and
# sigma 0.5 give a long-run mean ratio of 1 + 0.10 * exp(0.5**2 / 2) = 1.113, under the
# seed's ~1.2x; the 99th percentile is 1.32 and the 99.99th 1.64, well clear of a spike.
CALM_MEDIAN_EXCESS = 0.10
CALM_SIGMA = 0.5
LONG_RUN_IMBALANCE_LIMIT = 1.2  # seed 000: "long-run load imbalance is held under ~1.2x"
# Spiky: seed 000's "~2.9% of iterations", "the local load jumps 2.6x or more". We take the
# bound as the magnitude, and spike every layer: a micro-batch of alike tokens skews them all.
SPIKE_PROBABILITY = 0.029
SPIKE_RATIO = 2.6

PROFILE_NAMES = ("none", "calm", "spiky", "replay")
REPLAY_KEY = "tokens_per_expert"


class SkewProfileError(ValueError):
    """A profile name, replay file or shape a skew profile cannot use."""


@dataclass(frozen=True)
class RoutingShape:
    """What a target must cover: the model's main MoE layers and its router's top-k."""

    num_layers: int
    num_experts: int
    top_k: int

    @classmethod
    def of(cls, cfg: MoEConfig) -> RoutingShape:
        return cls(cfg.num_layers, cfg.num_experts, cfg.top_k)

    @property
    def max_ratio(self) -> float:
        """The highest max/mean a top-k router can reach: every token choosing one expert."""
        return self.num_experts / self.top_k


@dataclass(frozen=True)
class MicrobatchTarget:
    """One micro-batch's target routing."""

    load_fraction: Tensor  # [L, E] float64: share of the layer's token-slots; rows sum to 1
    spike: bool = False  # spiky: this micro-batch is one of the ~2.9%


class SkewProfile(Protocol):
    @property
    def name(self) -> str: ...  # read-only: the profiles are frozen dataclasses

    def check(self, shape: RoutingShape) -> None:
        """Raise ``SkewProfileError`` if this profile cannot drive a model of ``shape``."""

    def target(self, microbatch: int, shape: RoutingShape) -> MicrobatchTarget | None:
        """Micro-batch ``microbatch``'s target; None leaves the model's routing alone."""


def hot_expert_fraction(ratio: float, hot: int, num_experts: int) -> Tensor:
    """``[E]`` shares: expert ``hot`` at ``ratio`` times the mean, the others equal."""
    fraction = torch.full((num_experts,), (1 - ratio / num_experts) / max(num_experts - 1, 1))
    fraction[hot] = ratio / num_experts
    return fraction.double()


def _draws(seed: int, stream: str, microbatch: int) -> random.Random:
    """The generator for one (seed, stream, micro-batch): independent of every other."""
    return random.Random(f"moeperf-skew/{seed}/{stream}/{microbatch}")


@dataclass(frozen=True)
class NoSkew:
    """The model's own routing: no target, so the installed bias is zero."""

    name: str = "none"

    def check(self, shape: RoutingShape) -> None:
        pass

    def target(self, microbatch: int, shape: RoutingShape) -> MicrobatchTarget | None:
        return None


@dataclass(frozen=True)
class CalmProfile:
    """Per layer, one random hot expert at a log-normally drawn max/mean ratio."""

    seed: int
    median_excess: float = CALM_MEDIAN_EXCESS
    sigma: float = CALM_SIGMA
    name: str = "calm"

    def check(self, shape: RoutingShape) -> None:
        pass

    def draw(self, microbatch: int, shape: RoutingShape) -> tuple[list[float], list[int]]:
        """Each layer's max/mean ratio (capped at ``shape.max_ratio``) and hot expert."""
        rng = _draws(self.seed, "calm", microbatch)
        ratios, hot = [], []
        for _ in range(shape.num_layers):
            z = NormalDist().inv_cdf(min(max(rng.random(), 1e-12), 1 - 1e-12))
            ratio = 1 + self.median_excess * math.exp(self.sigma * z)
            ratios.append(min(ratio, shape.max_ratio))
            hot.append(min(int(rng.random() * shape.num_experts), shape.num_experts - 1))
        return ratios, hot

    def target(self, microbatch: int, shape: RoutingShape) -> MicrobatchTarget:
        ratios, hot = self.draw(microbatch, shape)
        rows = [
            hot_expert_fraction(r, h, shape.num_experts) for r, h in zip(ratios, hot, strict=True)
        ]
        return MicrobatchTarget(torch.stack(rows))


@dataclass(frozen=True)
class SpikyProfile:
    """Calm, except that a micro-batch spikes with ``probability``: then every layer's hot
    expert (the one calm drew) takes ``spike_ratio`` times the mean load."""

    seed: int
    probability: float = SPIKE_PROBABILITY
    spike_ratio: float = SPIKE_RATIO
    name: str = "spiky"

    def check(self, shape: RoutingShape) -> None:
        pass

    def is_spike(self, microbatch: int) -> bool:
        return _draws(self.seed, "spike", microbatch).random() < self.probability

    def target(self, microbatch: int, shape: RoutingShape) -> MicrobatchTarget:
        calm = CalmProfile(self.seed)
        if not self.is_spike(microbatch):
            return calm.target(microbatch, shape)
        _, hot = calm.draw(microbatch, shape)
        ratio = min(self.spike_ratio, shape.max_ratio)
        rows = [hot_expert_fraction(ratio, h, shape.num_experts) for h in hot]
        return MicrobatchTarget(torch.stack(rows), spike=True)


@dataclass(frozen=True)
class ReplayProfile:
    """Tokens per expert per layer read from a JSONL file; micro-batch m plays line m mod n."""

    path: Path
    line_numbers: tuple[int, ...]  # the file's line number (from 1) of each micro-batch
    tokens_per_expert: tuple[tuple[tuple[int, ...], ...], ...]  # [lines][L][E]
    name: str = "replay"

    @classmethod
    def load(cls, path: Path | str) -> ReplayProfile:
        line_numbers, loads = read_replay_file(Path(path))
        return cls(Path(path), line_numbers, loads)

    def check(self, shape: RoutingShape) -> None:
        expected = (
            f"{shape.num_layers} layers of {shape.num_experts} token counts each "
            f"(the model's MoE layers and experts)"
        )
        for line, layers in zip(self.line_numbers, self.tokens_per_expert, strict=True):
            where = f"replay file {self.path}, line {line}"
            if len(layers) != shape.num_layers:
                raise SkewProfileError(f"{where}: {len(layers)} layers; expected {expected}")
            for layer, counts in enumerate(layers):
                if len(counts) != shape.num_experts:
                    raise SkewProfileError(
                        f"{where}: layer {layer} has {len(counts)} experts; expected {expected}"
                    )
                total = sum(counts)
                if total == 0:
                    raise SkewProfileError(f"{where}: layer {layer} routes no tokens")
                if max(counts) * shape.top_k > total:
                    raise SkewProfileError(
                        f"{where}: layer {layer} gives one expert {max(counts)} of {total} "
                        f"token-slots; a top-{shape.top_k} router can give at most "
                        f"1/{shape.top_k} of them (was the file recorded with another top_k?)"
                    )

    def target(self, microbatch: int, shape: RoutingShape) -> MicrobatchTarget:
        layers = self.tokens_per_expert[microbatch % len(self.tokens_per_expert)]
        counts = torch.tensor(layers, dtype=torch.float64)
        return MicrobatchTarget(counts / counts.sum(dim=-1, keepdim=True))


def read_replay_file(path: Path) -> tuple[tuple[int, ...], tuple[tuple[tuple[int, ...], ...], ...]]:
    """Parse a replay file: each non-blank line ``{"tokens_per_expert": [[E ints] per layer]}``
    (other keys ignored). Returns the line numbers and the counts; shapes are checked later,
    against a model, by ``ReplayProfile.check``."""
    expected = f'an object {{"{REPLAY_KEY}": [[E non-negative ints] per layer]}}'
    try:
        text = path.read_text()
    except OSError as err:
        raise SkewProfileError(f"replay file {path}: cannot read it ({err.strerror})") from err
    line_numbers, loads = [], []
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        where = f"replay file {path}, line {number}"
        try:
            record = json.loads(raw)
        except json.JSONDecodeError as err:
            raise SkewProfileError(f"{where}: not JSON ({err.msg}); expected {expected}") from err
        layers = record.get(REPLAY_KEY) if isinstance(record, dict) else None
        if not _is_int_matrix(layers):
            raise SkewProfileError(f"{where}: expected {expected}")
        line_numbers.append(number)
        loads.append(tuple(tuple(counts) for counts in layers))
    if not loads:
        raise SkewProfileError(f"replay file {path}: no micro-batches; expected {expected}")
    return tuple(line_numbers), tuple(loads)


def _is_int_matrix(value: object) -> TypeGuard[list[list[int]]]:
    return (
        isinstance(value, list)
        and len(value) > 0
        and all(isinstance(row, list) and len(row) > 0 for row in value)
        and all(
            isinstance(c, int) and not isinstance(c, bool) and c >= 0 for row in value for c in row
        )
    )


def replay_line(tokens_per_expert: Tensor | Sequence[Sequence[int]], **extra: object) -> str:
    """One micro-batch's realized routing ``[L, E]`` as a replay-file line (no newline), so a
    recorded run can be replayed; ``extra`` keys (say ``microbatch=m``) ride along, ignored."""
    if isinstance(tokens_per_expert, Tensor):
        tokens_per_expert = tokens_per_expert.tolist()
    return json.dumps({**extra, REPLAY_KEY: [list(map(int, row)) for row in tokens_per_expert]})


def profile_by_name(
    name: str, seed: int, replay_path: Path | str | None = None, model: MoEConfig | None = None
) -> NoSkew | CalmProfile | SpikyProfile | ReplayProfile:
    """The profile called ``name``; ``replay_path`` is the replay profile's file, only.
    Given the ``model``'s config, the profile is checked against it at once (as
    ``skew_fit.install`` does)."""
    profile = _profile(name, seed, replay_path)
    if model is not None:
        profile.check(RoutingShape.of(model))
    return profile


def _profile(
    name: str, seed: int, replay_path: Path | str | None
) -> NoSkew | CalmProfile | SpikyProfile | ReplayProfile:
    if name not in PROFILE_NAMES:
        raise SkewProfileError(
            f"unknown routing skew profile {name!r}; valid: {', '.join(PROFILE_NAMES)}"
        )
    if name == "replay":
        if replay_path is None:
            raise SkewProfileError("routing skew profile 'replay' needs a replay file")
        return ReplayProfile.load(replay_path)
    if replay_path is not None:
        raise SkewProfileError(
            f"a replay file ({replay_path}) is only read by profile 'replay', not {name!r}"
        )
    if name == "calm":
        return CalmProfile(seed)
    if name == "spiky":
        return SpikyProfile(seed)
    return NoSkew()


def load_imbalance(tokens_per_expert: Tensor) -> Tensor:
    """max/mean expert load along the last axis: ``[L, E]`` -> ``[L]`` float (1.0 = balanced;
    NaN for a layer that routed no tokens, where the ratio has no meaning)."""
    load = tokens_per_expert.double()
    return load.max(dim=-1).values / load.mean(dim=-1)
