"""What a simulated training job is: model, parallel layout and cluster, validated.

Small typed records (the suites validate what users write with pydantic and build these);
``SimConfig.validate`` refuses a layout that does not divide the model or the devices,
naming every mismatch at once (the CLI turns it into exit 2).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from moeperf.targets.cluster_sim.recipe import Recipe
from moeperf.targets.model.config import MoEConfig
from moeperf.targets.training.flops import TRAINED_MTP_MODULES


class ClusterSimConfigError(ValueError):
    """A simulated job that cannot exist; the message names each mismatch."""


@dataclass(frozen=True)
class SimModel:
    """A MoE decoder's shape: what FLOPs, weights and activations are computed from.

    Attention is GQA (``num_kv_heads`` heads of ``head_dim``) unless ``kv_lora_rank`` > 0:
    then it is DeepSeek-V2/V3's multi-head latent attention (MLA, arXiv:2405.04434 section
    2.1), queries compressed to ``q_lora_rank`` (0: not compressed), keys and values to
    ``kv_lora_rank`` plus a shared ``qk_rope_head_dim`` RoPE key, each head with a
    ``qk_nope_head_dim`` + ``qk_rope_head_dim`` query/key and a ``v_head_dim`` value;
    ``num_kv_heads`` and ``head_dim`` are then unused by the formulas. The first
    ``dense_layers`` layers have a SwiGLU MLP of ``dense_hidden_size`` (DeepSeek-V3's
    first_k_dense_replace), the others ``num_experts`` routed experts (``top_k`` per token)
    plus ``shared_experts`` always-on experts, each of ``expert_hidden_size``.
    """

    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    num_experts: int
    top_k: int
    expert_hidden_size: int
    vocab_size: int
    seq_len: int
    shared_experts: int = 0
    dense_layers: int = 0
    dense_hidden_size: int = 0
    mtp_depth: int = 0
    bytes_per_element: int = 2  # activations and weights (bf16); 4 for the fp32 reference
    # MLA (kv_lora_rank > 0); the defaults keep GQA.
    q_lora_rank: int = 0  # 0: queries projected directly from the hidden state
    kv_lora_rank: int = 0  # 0: GQA, not MLA
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # DeepSeek's group-limited routing: experts in ``expert_groups`` groups, a token's top-k
    # drawn from its best ``expert_groups_per_token`` of them (n_group, topk_group).
    expert_groups: int = 1
    expert_groups_per_token: int = 1

    @classmethod
    def of(cls, cfg: MoEConfig, seq_len: int, bytes_per_element: int = 4) -> SimModel:
        """The reference trainer's model (targets.model.config), as the simulator sees it."""
        return cls(
            num_layers=cfg.num_layers, hidden_size=cfg.hidden_size, num_heads=cfg.num_heads,
            num_kv_heads=cfg.num_kv_heads, head_dim=cfg.head_dim, num_experts=cfg.num_experts,
            top_k=cfg.top_k, expert_hidden_size=cfg.expert_hidden_size,
            vocab_size=cfg.vocab_size, seq_len=seq_len,
            mtp_depth=min(cfg.mtp_depth, TRAINED_MTP_MODULES), bytes_per_element=bytes_per_element,
        )  # fmt: skip

    @property
    def moe_layers(self) -> int:
        return self.num_layers - self.dense_layers

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    def attention_params(self) -> float:
        """Weights of one attention block's projections (norms left out, as everywhere here:
        MLA's two latent RMSNorms add q_lora_rank + kv_lora_rank weights, under 1e-5 of the
        block). GQA: q, k, v and o. MLA: the query path (down and up, or one direct
        projection), the joint KV down projection (latent plus the shared RoPE key), the KV
        up projection (each head's no-RoPE key and value) and o."""
        c, h = self.hidden_size, self.num_heads
        if not self.is_mla:
            return float(c * self.head_dim * (2 * h + 2 * self.num_kv_heads))
        qk = h * (self.qk_nope_head_dim + self.qk_rope_head_dim)
        q_path = self.q_lora_rank * (c + qk) if self.q_lora_rank else c * qk
        kv_down = c * (self.kv_lora_rank + self.qk_rope_head_dim)
        kv_up = self.kv_lora_rank * h * (self.qk_nope_head_dim + self.v_head_dim)
        out = h * self.v_head_dim * c
        return float(q_path + kv_down + kv_up + out)

    def parameters(self) -> float:
        """Weights: embeddings, attention, router, experts (all), dense MLPs, head, MTP."""
        c = self.hidden_size
        attention = self.attention_params()
        expert = 3 * c * self.expert_hidden_size
        moe = c * self.num_experts + (self.num_experts + self.shared_experts) * expert
        dense = 3 * c * self.dense_hidden_size
        blocks = self.num_layers * attention + self.moe_layers * moe + self.dense_layers * dense
        mtp = self.mtp_depth * (attention + moe + 2 * c * c)
        return float(blocks + mtp + 2 * self.vocab_size * c)

    def active_parameters(self) -> float:
        """Weights one token touches (top_k of the routed experts)."""
        c = self.hidden_size
        routed_all = self.num_experts * 3 * c * self.expert_hidden_size
        routed_used = self.top_k * 3 * c * self.expert_hidden_size
        return self.parameters() - (self.moe_layers + self.mtp_depth) * (routed_all - routed_used)


@dataclass(frozen=True)
class Parallel:
    """Megatron's layout: tensor, pipeline (with virtual stages), expert, context, data.

    ``data`` is derived: devices / (tensor x pipeline x context). Experts are spread over
    ``expert`` ranks, each expert split over ``expert_tensor`` ranks (Megatron's
    expert_model_parallel_size and expert_tensor_parallel_size), taken from tensor x data x
    context: MoE parallel folding (Liu et al. 2025, arXiv:2504.14960), in which the expert
    layers' layout is chosen apart from attention's. With sequence parallelism a rank
    dispatches its ``1 / tensor`` of the micro-batch's tokens, gathered over ``expert_tensor``.
    """

    tensor: int = 1
    pipeline: int = 1
    virtual_stages: int = 1  # model chunks per pipeline rank (interleaved 1F1B when > 1)
    expert: int = 1
    context: int = 1
    expert_tensor: int = 1
    # Layers that pipeline x virtual_stages does not divide: split as evenly as possible,
    # the first chunks one layer more (the last, with the head and MTP, fewer), as jobs
    # with 61 layers do (Megatron's num_layers_in_first/last_pipeline_stage). Off: refused.
    uneven_layers: bool = False
    # Weights and gradients sharded over data parallel as well (FSDP / ZeRO-3); the
    # optimizer state is sharded either way (the distributed optimizer). Its all-gathers
    # and reduce-scatters are taken as hidden under compute, as the gradient reduction is.
    fsdp: bool = False


@dataclass(frozen=True)
class Cluster:
    """One accelerator type and its links; efficiencies are the share of peak reached."""

    devices: int
    peak_flops_per_s: float  # dense, in the training dtype
    memory_bytes: float
    hbm_bytes_per_s: float
    scale_up_domain: int  # devices per fast domain (an NVLink island, a supernode)
    scale_up_bytes_per_s: float  # per device, one direction
    scale_out_bytes_per_s: float  # per device, one direction
    host_link_bytes_per_s: float  # device <-> host, for offloaded activations
    gemm_efficiency: float = 0.6  # an assumption unless calibrated; stated in outputs
    comm_efficiency: float = 0.7
    # FP8 GEMMs (Recipe.precision "fp8"): dense FP8 peak and the share of it reached.
    fp8_peak_flops_per_s: float = 0.0  # 0: the device has no FP8 (a job asking is refused)
    fp8_gemm_efficiency: float = 0.6


@dataclass(frozen=True)
class SimConfig:
    model: SimModel
    parallel: Parallel
    cluster: Cluster
    global_batch: int  # sequences per optimizer step
    micro_batch: int  # sequences per micro-batch
    recipe: Recipe = field(default_factory=Recipe)

    @property
    def data_parallel(self) -> int:
        p = self.parallel
        return self.cluster.devices // (p.tensor * p.pipeline * p.context)

    @property
    def expert_data_parallel(self) -> int:
        """Replicas of each expert shard: tensor x data x context / (expert x expert_tensor)."""
        p = self.parallel
        return max(self.data_parallel * p.tensor * p.context // (p.expert * p.expert_tensor), 1)

    @property
    def moe_tokens_per_rank(self) -> float:
        """Tokens of one micro-batch a rank dispatches: its sequence-parallel share
        (1 / tensor of the context shard), gathered over the expert-tensor group."""
        p = self.parallel
        return self.micro_batch * self.model.seq_len / p.context / p.tensor * p.expert_tensor

    @property
    def microbatches(self) -> int:
        """Micro-batches per pipeline per step (gradient accumulation)."""
        return self.global_batch // (self.micro_batch * max(self.data_parallel, 1))

    @property
    def stages(self) -> int:
        """Model chunks in pipeline order (pipeline x virtual stages)."""
        return self.parallel.pipeline * self.parallel.virtual_stages

    def validate(self) -> None:
        m, p, c = self.model, self.parallel, self.cluster
        problems: list[str] = []
        for name, value in (
            ("tensor", p.tensor), ("pipeline", p.pipeline), ("virtual_stages", p.virtual_stages),
            ("expert", p.expert), ("context", p.context), ("expert_tensor", p.expert_tensor),
        ):  # fmt: skip
            if value < 1:
                problems.append(f"parallel.{name} must be >= 1, not {value}")
        if problems:
            raise ClusterSimConfigError("; ".join(problems))
        model_ranks = p.tensor * p.pipeline * p.context
        if c.devices % model_ranks:
            problems.append(
                f"devices {c.devices} is not a multiple of tensor x pipeline x context = "
                f"{p.tensor} x {p.pipeline} x {p.context} = {model_ranks}"
            )
        problems += _attention_problems(m, p)
        if m.num_layers < self.stages:
            problems.append(
                f"num_layers {m.num_layers} is fewer than pipeline x virtual_stages = "
                f"{p.pipeline} x {p.virtual_stages} = {self.stages}"
            )
        elif m.num_layers % self.stages and not p.uneven_layers:
            problems.append(
                f"num_layers {m.num_layers} is not a multiple of pipeline x virtual_stages = "
                f"{p.pipeline} x {p.virtual_stages} = {self.stages} (uneven_layers = true "
                "splits them as evenly as possible)"
            )
        if m.num_experts % p.expert:
            problems.append(f"expert {p.expert} must divide num_experts {m.num_experts}")
        dp = self.data_parallel
        if p.tensor % p.expert_tensor:
            problems.append(f"expert_tensor {p.expert_tensor} must divide tensor {p.tensor}")
        elif dp >= 1 and (p.tensor * dp * p.context) % (p.expert * p.expert_tensor):
            problems.append(
                f"expert x expert_tensor = {p.expert} x {p.expert_tensor} must divide tensor "
                f"x data x context = {p.tensor} x {dp} x {p.context} (the ranks experts are "
                "spread over)"
            )
        if self.recipe.precision == "fp8" and c.fp8_peak_flops_per_s <= 0:
            problems.append("precision fp8 needs a cluster with an FP8 peak (fp8_peak_flops_per_s)")
        if m.expert_groups < 1 or not 1 <= m.expert_groups_per_token <= m.expert_groups:
            problems.append(
                f"expert_groups_per_token {m.expert_groups_per_token} must be in [1, "
                f"expert_groups {m.expert_groups}]"
            )
        if m.seq_len % p.context:
            problems.append(f"context {p.context} must divide seq_len {m.seq_len}")
        if dp >= 1 and self.global_batch % (self.micro_batch * dp):
            problems.append(
                f"global_batch {self.global_batch} is not a multiple of micro_batch x data = "
                f"{self.micro_batch} x {dp} = {self.micro_batch * dp}"
            )
        elif p.virtual_stages > 1 and dp >= 1 and self.microbatches % p.pipeline:
            problems.append(
                f"interleaved 1F1B needs micro-batches ({self.microbatches}) to be a multiple "
                f"of pipeline {p.pipeline}"
            )
        if not 1 <= m.top_k <= m.num_experts:
            problems.append(f"top_k {m.top_k} must be in [1, num_experts {m.num_experts}]")
        if m.dense_layers > m.num_layers:
            problems.append(f"dense_layers {m.dense_layers} exceeds num_layers {m.num_layers}")
        if problems:
            raise ClusterSimConfigError("; ".join(problems))


def _attention_problems(m: SimModel, p: Parallel) -> list[str]:
    """Tensor parallelism splits heads; MLA has no K/V heads of its own (each query head has
    its key and value, up-projected from the shared latent), so only num_heads must split."""
    if not m.is_mla:
        if m.num_heads % p.tensor or m.num_kv_heads % p.tensor:
            return [
                f"tensor {p.tensor} must divide num_heads {m.num_heads} and "
                f"num_kv_heads {m.num_kv_heads}"
            ]
        return []
    problems = []
    dims = ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
    missing = [name for name in dims if getattr(m, name) < 1]
    if missing:
        problems.append(
            f"an MLA model (kv_lora_rank {m.kv_lora_rank}) needs {', '.join(missing)} > 0"
        )
    if m.num_heads % p.tensor:
        problems.append(f"tensor {p.tensor} must divide num_heads {m.num_heads}")
    return problems
