"""One rank of the distributed trainer, built in this process (building a rank runs no
collective): the slice of the model it holds, and the memory budget it is held to."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from moeperf.targets.model.config import MoEConfig
from moeperf.targets.model.model import MoETransformer
from moeperf.targets.training import memory
from moeperf.targets.training.distributed.comm import Comm
from moeperf.targets.training.distributed.layout import Layout
from moeperf.targets.training.distributed.rank_trainer import DistConfig, RankTrainer
from moeperf.targets.training.setup import TrainerConfig, TrainingConfigError

# Experts big next to the rest, as in a real MoE: a rank holding a quarter of them holds
# well under half the weights.
MODEL = MoEConfig(
    hidden_size=64, expert_hidden_size=1024, num_layers=2, num_heads=4, num_kv_heads=2,
    num_experts=8, top_k=2, mtp_depth=1,
)  # fmt: skip


@pytest.fixture(scope="module")
def tokens(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("tokens") / "tokens.pt"
    torch.save(torch.randint(0, MODEL.vocab_size, (5_000,)), path)
    return str(path)


def rank_trainer(tokens: str, out: Path, layout: Layout, rank: int, **changes) -> RankTrainer:
    trainer = TrainerConfig(
        model=MODEL, init_from=None, seq_len=16, micro_batch_size=1, microbatches=4,
        threads=1, token_stream_path=tokens, **changes,
    )  # fmt: skip
    return RankTrainer(DistConfig(trainer, layout, str(out)), rank, Comm(rank, {}))


def test_a_rank_holds_its_stage_and_its_experts_under_the_models_names(tokens, tmp_path):
    layout = Layout(ep=4, pp=2)  # rank 5: stage 1 (the last), experts 2 and 3
    trainer = rank_trainer(tokens, tmp_path, layout, rank=5)
    names = set(trainer.model.state_dict())
    full = set(MoETransformer(MODEL).state_dict())
    assert names < full
    experts = {n.split(".experts.")[1].split(".")[0] for n in names if ".experts." in n}
    assert experts == {"2", "3"}
    assert not [n for n in names if n.startswith("model.layers.0.")]
    assert [n for n in names if n.startswith("model.layers.1.")]
    # the last stage: head, final norm, MTP, and its copy of the embedding MTP needs
    assert {"lm_head.weight", "model.norm.weight", "model.embed_tokens.weight"} <= names
    assert [n for n in names if n.startswith("mtp.")]


def test_a_budget_below_a_ranks_own_weights_is_refused(tokens, tmp_path):
    with pytest.raises(TrainingConfigError, match="is smaller than"):
        rank_trainer(tokens, tmp_path, Layout(ep=4), rank=0, budget_bytes=1_000_000)


def test_a_budget_that_holds_the_ranks_slice_is_accepted(tokens, tmp_path):
    unlimited = rank_trainer(tokens, tmp_path / "unlimited", Layout(ep=4), rank=0)
    rank_static = unlimited.budget.stats().static.total_bytes
    whole_static = memory.training_static_bytes(MoETransformer(MODEL)).total_bytes
    assert rank_static < whole_static / 2
    budget = (rank_static + whole_static) // 2  # twice what the rank's weights need, or so
    trainer = rank_trainer(tokens, tmp_path / "budget", Layout(ep=4), rank=0, budget_bytes=budget)
    assert trainer.budget.stats().static.total_bytes == rank_static
