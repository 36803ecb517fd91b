"""What a training run of a reference model is: ``TrainRecipe`` (the model's config, the
batch, the schedule and the loss weights), the recipes ``--arch`` and ``--quick`` pick
from, how a config becomes its model, and recipe.json's record of a recipe.

Apart from the loop and its command line (``train``) because the trainer
(targets.training) and the tests read and build recipes without running either.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch

from moeperf.targets.model.checkpoint import ARCHITECTURES, ReferenceModel
from moeperf.targets.model.config import MoEConfig
from moeperf.targets.model.hybrid import HybridMoETransformer
from moeperf.targets.model.hybrid_config import HybridConfig
from moeperf.targets.model.model import MoETransformer

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}

ModelConfig = MoEConfig | HybridConfig


def build_model(config: ModelConfig) -> ReferenceModel:
    """The model a config describes: ``MoETransformer`` or ``HybridMoETransformer``."""
    if isinstance(config, HybridConfig):
        return HybridMoETransformer(config)
    return MoETransformer(config)


def architecture(config: ModelConfig) -> str:
    """The config.json ``model_type`` of the model ``config`` builds ("mixtral" or
    "qwen3_next"): recipe.json's recipe.model.architecture."""
    return next(a.model_type for a in ARCHITECTURES.values() if a.config is type(config))


@dataclass(frozen=True)
class TrainRecipe:
    model: ModelConfig = field(default_factory=lambda: MoEConfig(mtp_depth=1))
    seq_len: int = 256
    batch_size: int = 16  # sequences per step
    steps: int = 900
    lr: float = 2e-3  # peak; tiny models take a higher rate than GPT-3's 6e-4
    warmup_steps: int = 50
    min_lr_ratio: float = 0.1  # cosine decays to lr * this (Chinchilla's 10x)
    weight_decay: float = 0.1  # on matrices only, not norms (nanoGPT)
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float = 1.0
    mtp_loss_weight: float = 0.3  # DeepSeek-V3's lambda for its first 10T tokens
    aux_loss_weight: float = 0.01  # Switch Transformer's alpha
    eval_fraction: float = 0.02  # of the documents, held out
    eval_every: int = 100  # steps
    log_every: int = 10  # steps between short progress lines
    eval_windows: int = 64  # most seq_len windows of held-out text per evaluation
    seed: int = 1337
    threads: int = 2  # torch intra-op threads
    dtype: str = "float32"

    def __post_init__(self) -> None:
        positive = ("seq_len", "batch_size", "steps", "eval_every", "log_every", "eval_windows")
        problems = [
            f"{name} must be >= 1" for name in (*positive, "threads") if getattr(self, name) < 1
        ]
        if self.seq_len > self.model.max_position:
            problems.append("seq_len must be <= model.max_position")
        if not 0 < self.eval_fraction < 0.5:
            problems.append("eval_fraction must be in (0, 0.5)")
        if self.dtype not in DTYPES:
            problems.append(f"dtype must be one of {sorted(DTYPES)}")
        if problems:
            raise ValueError("; ".join(problems))


# A model small enough to train in seconds: for smoke tests, not for serving.
QUICK_RECIPE = TrainRecipe(
    model=MoEConfig(
        vocab_size=1024,
        hidden_size=64,
        expert_hidden_size=64,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        num_experts=4,
        top_k=2,
        max_position=256,
        mtp_depth=1,
    ),
    seq_len=64,
    batch_size=8,
    steps=30,
    lr=3e-3,
    warmup_steps=5,
    eval_every=10,
    eval_windows=16,
)

# The hybrid (Qwen3-Next) reference model: HybridConfig()'s shape, TrainRecipe's schedule.
HYBRID_RECIPE = TrainRecipe(model=HybridConfig())

# Its smoke-test size: two linear-attention layers and one full-attention layer (interval 3,
# so the last layer is full attention), trains in seconds.
QUICK_HYBRID_CONFIG = HybridConfig(
    vocab_size=1024,
    hidden_size=64,
    num_layers=3,
    full_attention_interval=3,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    partial_rotary_factor=0.25,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=16,
    linear_value_head_dim=16,
    num_experts=4,
    top_k=2,
    expert_hidden_size=64,
    shared_expert_hidden_size=64,
    max_position=256,
    mtp_depth=1,
)
QUICK_HYBRID_RECIPE = replace(QUICK_RECIPE, model=QUICK_HYBRID_CONFIG)

# --arch -> (full recipe, --quick recipe)
BASE_RECIPES = {
    "mixtral": (TrainRecipe(), QUICK_RECIPE),
    "hybrid": (HYBRID_RECIPE, QUICK_HYBRID_RECIPE),
}


def recipe_dict(recipe: TrainRecipe) -> dict[str, Any]:
    """recipe.json's "recipe": the fields, with the model's architecture (its config.json
    ``model_type``) first in "model"."""
    data = asdict(recipe)
    data["model"] = {"architecture": architecture(recipe.model), **data["model"]}
    return data
