"""How a job's ranks split the work: expert (EP), pipeline (PP) and data (DP) parallel.

Ranks are laid out as Megatron lays out its groups, pipeline outermost and expert
innermost: rank = (stage * dp + dp_index) * ep + ep_index. Expert parallel borrows from
data parallel (Megatron's expert_model_parallel_size): every rank of an expert group
trains its own micro-batches and sends each token to the rank holding its expert, so one
stage trains ``ep * dp`` micro-batch streams side by side. Gradients are summed over the
ranks that hold the same weights: dense weights over the stage's ``ep * dp`` ranks,
experts over the ``dp`` ranks holding the same experts.
"""

from __future__ import annotations

from dataclasses import dataclass


class LayoutError(ValueError):
    """A layout that does not fit the model or the batch (the message says what does)."""


@dataclass(frozen=True)
class Layout:
    ep: int = 1  # expert parallel: ranks the experts are split over
    pp: int = 1  # pipeline parallel: stages
    dp: int = 1  # data parallel: replicas of the (stage's) weights, experts included

    @property
    def world_size(self) -> int:
        return self.ep * self.pp * self.dp

    @property
    def data_width(self) -> int:
        """Micro-batch streams trained side by side in one stage."""
        return self.ep * self.dp

    @property
    def name(self) -> str:
        parts = [f"{k}{v}" for k, v in (("ep", self.ep), ("pp", self.pp), ("dp", self.dp)) if v > 1]
        return "-".join(parts) or "single"

    def check(self, num_experts: int, num_layers: int, microbatches: int) -> None:
        problems = []
        for name in ("ep", "pp", "dp"):
            if getattr(self, name) < 1:
                problems.append(f"{name} must be >= 1")
        if self.ep >= 1 and num_experts % self.ep:
            problems.append(f"ep ({self.ep}) must divide the model's {num_experts} experts")
        if self.pp >= 1 and num_layers % self.pp:
            problems.append(f"pp ({self.pp}) must divide the model's {num_layers} layers")
        if self.data_width >= 1 and microbatches % self.data_width:
            problems.append(
                f"microbatches ({microbatches}) must be a multiple of ep x dp "
                f"({self.data_width}): each of those ranks trains its share of every step"
            )
        if problems:
            raise LayoutError("; ".join(problems))

    def coords(self, rank: int) -> RankCoords:
        if not 0 <= rank < self.world_size:
            raise LayoutError(f"rank {rank} is outside world size {self.world_size}")
        ep_index = rank % self.ep
        dp_index = (rank // self.ep) % self.dp
        stage = rank // (self.ep * self.dp)
        return RankCoords(rank, stage, dp_index, ep_index)

    def rank_of(self, stage: int, dp_index: int, ep_index: int) -> int:
        return (stage * self.dp + dp_index) * self.ep + ep_index

    def expert_group(self, rank: int) -> list[int]:
        """The ranks that exchange tokens with ``rank`` (same stage and replica)."""
        c = self.coords(rank)
        return [self.rank_of(c.stage, c.dp_index, e) for e in range(self.ep)]

    def dense_group(self, rank: int) -> list[int]:
        """The ranks holding the same dense weights as ``rank`` (its stage)."""
        c = self.coords(rank)
        return [self.rank_of(c.stage, d, e) for d in range(self.dp) for e in range(self.ep)]

    def expert_data_group(self, rank: int) -> list[int]:
        """The ranks holding the same experts as ``rank`` (its stage, its expert slice)."""
        c = self.coords(rank)
        return [self.rank_of(c.stage, d, c.ep_index) for d in range(self.dp)]

    def all_groups(self) -> list[list[int]]:
        """Every group the job creates, each once, in one order every rank agrees on
        (torch.distributed.new_group must be called by all ranks alike)."""
        found: list[list[int]] = []
        for maker in (
            self.expert_group,
            self.dense_group,
            self.expert_data_group,
            self.embedding_group,
        ):
            for rank in range(self.world_size):
                group = maker(rank)
                if len(group) > 1 and group not in found:
                    found.append(group)
        return found

    def embedding_group(self, rank: int) -> list[int]:
        """The first and last stage's ranks of ``rank``'s replica: the MTP module on the last
        stage shares the embedding with the first (DeepSeek-V3), so their copies' gradients
        are summed, as Megatron does for tied embeddings. Just ``[rank]`` elsewhere."""
        c = self.coords(rank)
        if self.pp == 1 or c.stage not in (0, self.pp - 1):
            return [rank]
        return [
            self.rank_of(0, c.dp_index, c.ep_index),
            self.rank_of(self.pp - 1, c.dp_index, c.ep_index),
        ]


@dataclass(frozen=True)
class RankCoords:
    rank: int
    stage: int
    dp_index: int
    ep_index: int

    def data_index(self, layout: Layout) -> int:
        """Which of the stage's ``ep * dp`` micro-batch streams this rank trains."""
        return self.dp_index * layout.ep + self.ep_index


def local_experts(layout: Layout, ep_index: int, num_experts: int) -> range:
    per_rank = num_experts // layout.ep
    return range(ep_index * per_rank, (ep_index + 1) * per_rank)


def stage_layers(layout: Layout, stage: int, num_layers: int) -> range:
    per_stage = num_layers // layout.pp
    return range(stage * per_stage, (stage + 1) * per_stage)
