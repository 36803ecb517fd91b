"""One pipeline stage of the tiny MoE, and the model cut down to what a rank holds.

A stage runs its slice of the main layers; the first embeds the tokens, the last applies the
final norm, the output head, the loss and the MTP module (which needs the embedding too:
the last stage keeps a copy, its gradient summed with the first stage's, as Megatron does
for tied embeddings). What a rank does not hold is replaced by an empty placeholder, so
parameter names stay the single-process model's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from moeperf.targets.model.attention import causal_attention, rotary_cos_sin
from moeperf.targets.model.model import MoETransformer, batch_output
from moeperf.targets.model.moe import MoE
from moeperf.targets.training.distributed.comm import Comm
from moeperf.targets.training.distributed.ep_moe import ExpertParallelMoE


@dataclass(frozen=True)
class StagePlan:
    layers: range  # the main layers this stage runs
    first: bool
    last: bool


@dataclass
class StageOutput:
    hidden: Tensor  # [N, C] what the next stage receives (the last stage: its final hidden)
    aux_sum: Tensor  # sum of this stage's layers' load-balancing losses
    tokens_per_expert: Tensor  # [layers of this stage, E]
    loss: Tensor | None = None  # the last stage: next-token cross-entropy
    mtp_loss: Tensor | None = None  # the last stage: MTP module 0's


def cut_to_stage(model: MoETransformer, plan: StagePlan) -> None:
    """Drop, in place, every module another stage holds."""
    for layer in range(model.config.num_layers):
        if layer not in plan.layers:
            model.model.layers[layer] = nn.Identity()
    needs_embedding = plan.first or (plan.last and model.config.mtp_depth > 0)
    if not needs_embedding:
        model.model.embed_tokens = nn.Identity()  # type: ignore[assignment]
    if not plan.last:
        model.model.norm = nn.Identity()  # type: ignore[assignment]
        model.lm_head = nn.Identity()  # type: ignore[assignment]
        model.mtp = nn.ModuleList()


def spread_experts(
    model: MoETransformer, local: range, members: list[int], comm: Comm
) -> list[ExpertParallelMoE]:
    """Replace, in place, every MoE layer this rank holds (MTP's too) by its expert-parallel
    version keeping only the ``local`` experts."""
    swapped = []
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if type(child) is MoE:
                ep_moe = ExpertParallelMoE(child, local, members, comm)
                setattr(module, name, ep_moe)
                swapped.append(ep_moe)
    return swapped


def stage_forward(
    model: MoETransformer, plan: StagePlan, idx: Tensor, targets: Tensor, x_in: Tensor | None
) -> StageOutput:
    """``idx``, ``targets`` ``[B, T]``; ``x_in [B*T, C]`` the previous stage's output (None
    on the first stage)."""
    batch, seq_len = idx.shape
    attend = causal_attention(batch, seq_len)
    positions = torch.arange(seq_len, device=idx.device).repeat(batch)
    cos, sin = rotary_cos_sin(positions, model.config.head_dim, model.config.rope_theta)
    x = model.model.embed_tokens(idx.flatten()) if x_in is None else x_in
    routings = []
    for layer in plan.layers:
        x, routing = model.blocks[layer](x, cos, sin, attend)
        routings.append(routing)
    out = StageOutput(
        hidden=x,
        aux_sum=torch.stack([r.aux_loss for r in routings]).sum(),
        tokens_per_expert=torch.stack([r.tokens_per_expert for r in routings]),
    )
    if plan.last:
        full = batch_output(model, idx, targets, x, routings, attend)
        out.loss, out.mtp_loss = full.loss, full.mtp_loss
    return out
