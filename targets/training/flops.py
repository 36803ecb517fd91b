"""Model FLOPs of a training step of the tiny MoE, in Megatron's convention.

Sources: Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU
Clusters Using Megatron-LM" (arXiv:2104.04473), appendix "Floating-Point Operations"; and
Megatron-LM's ``num_floating_point_operations`` (``megatron/training/training.py``), which
counts a MoE layer's routed experts as top_k of N.

Every matrix multiply counts 2 FLOPs per multiply-add and runs 3 times in a training step:
forward, backward for the input gradient, backward for the weight gradient. Only those GEMMs
count: embedding lookups, norms, RoPE, softmax, SiLU, the routing bookkeeping and the loss are
elementwise and left out, as Megatron leaves them out. Activation recomputation is never
counted (model FLOPs, not hardware FLOPs: the paper's 96 = 4 x 24 includes a recompute
pass, training.py's 3 x 2 does not).

Per token, with C hidden, H query heads, Hkv key/value heads, D head_dim, T seq_len, E experts,
k top_k, F expert width, V vocabulary and c the causal factor, one transformer block costs::

    attention projections  6 * C * D * (H + 2 Hkv) + 6 * H * D * C      (q, k, v, o)
    attention scores       6 * 2 * H * D * T * c                        (QK^T and AV)
    router                 6 * C * E
    routed experts         6 * k * 3 * C * F                            (SwiGLU w1, w3, w2)

and the model adds ``6 * C * V`` per output head (lm_head). Each MTP module (DeepSeek-V3,
arXiv:2412.19437, section 2.2) adds ``6 * 2C * C`` (eh_proj), one more block, and one more
head pass through the shared lm_head, as Megatron counts ``mtp_num_layers``::

    total = (L + M) * block + (1 + M) * 6 * C * V + M * 6 * 2 * C * C

with M the MTP modules the training forward runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from moeperf.targets.model.config import MoEConfig

# A training step runs each GEMM 3 times (forward, input gradient, weight gradient) at
# 2 FLOPs per multiply-add: Megatron's forward_backward_expansion_factor x fma_expansion_factor.
GEMM_PASSES = 3
FLOPS_PER_MAC = 2
TRAIN_FLOPS_PER_MAC = GEMM_PASSES * FLOPS_PER_MAC

# Megatron-LM's training.py (transformer_flops, on main as of 2025) counts half of the
# T x T score and value products: "/ 2  # causal mask (only half of the mask is non-zero)".
# The 2021 paper's appendix (and training.py before that change) counts the full T x T, i.e.
# 1.0. The exact causal share is (T + 1) / 2T; Megatron rounds it to 1/2.
MEGATRON_CAUSAL_FACTOR = 0.5

# MoETransformer.forward(idx, targets) trains MTP module 0 only; modules 1.. are chained
# from it in serving. So a training step runs at most this many MTP modules.
TRAINED_MTP_MODULES = 1


@dataclass(frozen=True)
class TrainingFlops:
    """Model FLOPs per token of one training step (forward + backward), by component.

    Block components (attention, router, experts) are summed over all transformer blocks
    run (main layers and the MTP modules' blocks); ``logits_per_token`` over all head passes.
    """

    seq_len: int
    causal_factor: float
    main_layers: int
    mtp_modules: int
    attention_projections_per_token: float
    attention_scores_per_token: float
    router_per_token: float
    experts_per_token: float
    logits_per_token: float
    mtp_eh_proj_per_token: float

    @property
    def blocks(self) -> int:
        return self.main_layers + self.mtp_modules

    @property
    def total_per_token(self) -> float:
        return (
            self.attention_projections_per_token
            + self.attention_scores_per_token
            + self.router_per_token
            + self.experts_per_token
            + self.logits_per_token
            + self.mtp_eh_proj_per_token
        )

    @property
    def total_per_sequence(self) -> float:
        """FLOPs of one sequence of ``seq_len`` tokens."""
        return self.total_per_token * self.seq_len

    @property
    def mtp_per_token(self) -> float:
        """The MTP modules' share: eh_proj, their blocks and their head passes."""
        if not self.mtp_modules:
            return 0.0
        blocks_total = (
            self.attention_projections_per_token
            + self.attention_scores_per_token
            + self.router_per_token
            + self.experts_per_token
        )
        return (
            self.mtp_eh_proj_per_token
            + blocks_total * self.mtp_modules / self.blocks
            + self.logits_per_token * self.mtp_modules / (1 + self.mtp_modules)
        )

    def components_per_token(self) -> tuple[tuple[str, float], ...]:
        """(component, FLOPs per token) pairs in a fixed order, for tables."""
        return (
            ("attention_projections", self.attention_projections_per_token),
            ("attention_scores", self.attention_scores_per_token),
            ("router", self.router_per_token),
            ("experts", self.experts_per_token),
            ("logits", self.logits_per_token),
            ("mtp_eh_proj", self.mtp_eh_proj_per_token),
        )


def flops_breakdown(
    cfg: MoEConfig,
    seq_len: int,
    include_mtp: bool = True,
    causal_factor: float = MEGATRON_CAUSAL_FACTOR,
) -> TrainingFlops:
    """Per-token training FLOPs of ``cfg`` on sequences of ``seq_len`` tokens."""
    if seq_len < 1:
        raise ValueError(f"seq_len must be >= 1, got {seq_len}")
    if not 0.0 < causal_factor <= 1.0:
        raise ValueError(f"causal_factor must be in (0, 1], got {causal_factor}")
    c, d = cfg.hidden_size, cfg.head_dim
    q_width, kv_width = cfg.num_heads * d, cfg.num_kv_heads * d
    mtp_modules = min(cfg.mtp_depth, TRAINED_MTP_MODULES) if include_mtp else 0
    blocks = cfg.num_layers + mtp_modules
    heads = 1 + mtp_modules

    projections_macs = c * (q_width + 2 * kv_width) + q_width * c  # q, k, v; o
    scores_macs = 2 * q_width * seq_len * causal_factor  # QK^T and AV, per query token
    router_macs = c * cfg.num_experts
    experts_macs = cfg.top_k * 3 * c * cfg.expert_hidden_size  # w1, w3: C->F; w2: F->C
    return TrainingFlops(
        seq_len=seq_len,
        causal_factor=causal_factor,
        main_layers=cfg.num_layers,
        mtp_modules=mtp_modules,
        attention_projections_per_token=TRAIN_FLOPS_PER_MAC * blocks * projections_macs,
        attention_scores_per_token=TRAIN_FLOPS_PER_MAC * blocks * scores_macs,
        router_per_token=TRAIN_FLOPS_PER_MAC * blocks * router_macs,
        experts_per_token=TRAIN_FLOPS_PER_MAC * blocks * experts_macs,
        logits_per_token=TRAIN_FLOPS_PER_MAC * heads * c * cfg.vocab_size,
        mtp_eh_proj_per_token=TRAIN_FLOPS_PER_MAC * mtp_modules * 2 * c * c,
    )


def training_flops(
    cfg: MoEConfig,
    tokens: int,
    seq_len: int,
    include_mtp: bool = True,
    causal_factor: float = MEGATRON_CAUSAL_FACTOR,
) -> float:
    """Model FLOPs of training on ``tokens`` tokens laid out in sequences of ``seq_len``."""
    if tokens < 0:
        raise ValueError(f"tokens must be >= 0, got {tokens}")
    return tokens * flops_breakdown(cfg, seq_len, include_mtp, causal_factor).total_per_token


def training_flops_per_token(
    cfg: MoEConfig,
    seq_len: int,
    include_mtp: bool = True,
    causal_factor: float = MEGATRON_CAUSAL_FACTOR,
) -> float:
    """Model FLOPs per trained token: ``flops_breakdown(...).total_per_token``."""
    return flops_breakdown(cfg, seq_len, include_mtp, causal_factor).total_per_token
