"""The optimizer of a training run and its learning-rate schedule: AdamW with decay on
matrices only, linear warmup then cosine decay.

Apart from the loop (``train``) because the trainer (targets.training, one process or
many) builds the same optimizer and follows the same schedule.
"""

from __future__ import annotations

import math

import torch

from moeperf.targets.model.checkpoint import ReferenceModel
from moeperf.targets.model.train_recipe import TrainRecipe


def lr_at(step: int, recipe: TrainRecipe) -> float:
    """Linear warmup to ``lr``, then cosine decay to ``lr * min_lr_ratio`` at the last step."""
    if step < recipe.warmup_steps:
        return recipe.lr * (step + 1) / recipe.warmup_steps
    progress = (step - recipe.warmup_steps) / max(recipe.steps - recipe.warmup_steps, 1)
    min_lr = recipe.lr * recipe.min_lr_ratio
    return min_lr + 0.5 * (recipe.lr - min_lr) * (1 + math.cos(math.pi * min(progress, 1.0)))


def make_optimizer(model: ReferenceModel, recipe: TrainRecipe) -> torch.optim.AdamW:
    """AdamW, decaying matrices and embeddings but not norm weights (nanoGPT)."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": recipe.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=recipe.lr, betas=recipe.betas)
