"""The held-out evaluation of a training run: losses, top-1 accuracies, and how often the
MTP module's top token agrees with the main model's.

Apart from the loop (``train``): it runs the model in eval mode over fixed windows, a pass
of its own that the loop calls every ``eval_every`` steps.
"""

from __future__ import annotations

import torch
from torch import Tensor

from moeperf.targets.model.attention import causal_attention
from moeperf.targets.model.checkpoint import ReferenceModel
from moeperf.targets.model.train_recipe import TrainRecipe


@torch.no_grad()
def evaluate(model: ReferenceModel, stream: Tensor, recipe: TrainRecipe) -> dict[str, float]:
    """Held-out losses and top-1 accuracies over consecutive, non-overlapping windows.

    ``mtp_top1_agreement`` is how often the MTP module's top token equals the main model's
    at the same position: the acceptance rate of one greedy draft token in speculative
    decoding. Position 0 is left out of the MTP numbers (its h_prev is zeros, which serving
    never feeds).
    """
    model.eval()
    t = recipe.seq_len
    num_windows = min(recipe.eval_windows, (len(stream) - 1) // t)
    windows = torch.stack([stream[i * t : i * t + t + 1] for i in range(num_windows)])
    totals = dict.fromkeys(("loss", "mtp_loss", "top1", "mtp_top1", "mtp_agree"), 0.0)
    batches = windows.split(recipe.batch_size)
    for batch in batches:
        x, y = batch[:, :-1], batch[:, 1:]
        out = model(x, y)
        main_pred = out.logits.argmax(-1)
        totals["loss"] += out.loss.item()
        totals["top1"] += (main_pred == y).float().mean().item()
        if model.config.mtp_depth:
            mtp_pred = _mtp_logits(model, x, out.hidden).argmax(-1)[:, 1:]
            totals["mtp_loss"] += out.mtp_loss.item()
            totals["mtp_top1"] += (mtp_pred == y[:, 1:]).float().mean().item()
            totals["mtp_agree"] += (mtp_pred == main_pred[:, 1:]).float().mean().item()
    model.train()
    n = len(batches)
    result = {
        "eval_loss": totals["loss"] / n,
        "eval_top1_accuracy": totals["top1"] / n,
        "eval_tokens": num_windows * t,
    }
    if model.config.mtp_depth:
        result |= {
            "eval_mtp_loss": totals["mtp_loss"] / n,
            "eval_mtp_top1_accuracy": totals["mtp_top1"] / n,
            "eval_mtp_top1_agreement": totals["mtp_agree"] / n,
        }
    return result


def _mtp_logits(model: ReferenceModel, idx: Tensor, hidden: Tensor) -> Tensor:
    """MTP module 0's logits ``[B, T, V]`` as ``MoETransformer.forward`` computes its loss:
    entry t from h_{t-1} and token t."""
    batch, seq_len = idx.shape
    h_prev = torch.cat([torch.zeros_like(hidden[:, :1]), hidden[:, :-1]], dim=1).flatten(0, 1)
    positions = torch.arange(seq_len).repeat(batch)
    attend = causal_attention(batch, seq_len)
    mtp_hidden = model.mtp_forward(0, h_prev, idx.flatten(), positions, attend)
    return model.mtp_logits(0, mtp_hidden).view(batch, seq_len, -1)
