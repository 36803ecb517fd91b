"""A tiny Mixture-of-Experts decoder, written to be read top to bottom.

Mixtral's architecture (Jiang et al. 2024, arXiv:2401.04088; transformers'
``modeling_mixtral.py``): RMSNorm, rotary position embeddings, grouped-query attention, and
in every layer a softmax router choosing top-k of N SwiGLU experts, the k weights
renormalized to sum to one. Parameter names follow Mixtral's so a directory we write loads
with ``AutoModelForCausalLM``.

Beside it, DeepSeek-V3's multi-token prediction (arXiv:2412.19437, section 2.2): module d
combines the previous depth's hidden state at position i with the embedding of token i+1
and predicts token i+2, sharing the embedding and the output head with the main model.

Tokens travel flat, as ``[N, C]`` (N tokens of any number of sequences): a training batch
``[B, T]`` is flattened, and the serving engine packs many requests into one N. Attention is
the only place where sequences matter, so it is passed in as a function (``AttentionFn``):
dense causal attention here for training, the paged KV cache in the serving engine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from moeperf.targets.model.config import MoEConfig

# (layer slot, q [N, H, D], k [N, Hkv, D], v [N, Hkv, D]) -> [N, H, D]. Slots 0..L-1 are
# the main layers, L + d the MTP module d: a KV cache keeps one entry per slot.
AttentionFn = Callable[[int, Tensor, Tensor, Tensor], Tensor]

# An operator whose saved activations a training policy may keep, recompute or offload:
# ("layer", l, -1) a whole transformer layer, ("attention", l, -1) its attention half,
# ("expert", l, e) one expert's SwiGLU over the tokens routed to it.
Op = tuple[str, int, int]


class OpRunner(Protocol):
    """Runs the model's operators; activation-memory policies (the trainer's) implement it.

    ``after_routing`` is called once a layer's router has chosen, before its experts run:
    the point where a policy knows this micro-batch's expert loads. A recomputed operator's
    forward runs again in backward, calls included.
    """

    def after_routing(self, layer: int, tokens_per_expert: Tensor) -> None: ...

    def run(self, op: Op, fn: Callable[..., Any], *args: Any) -> Any: ...


class DirectRunner:
    """Run every operator as is: autograd keeps what it saves (inference, plain training)."""

    def after_routing(self, layer: int, tokens_per_expert: Tensor) -> None:
        pass

    def run(self, op: Op, fn: Callable[..., Any], *args: Any) -> Any:
        return fn(*args)


DIRECT = DirectRunner()


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        # In float32 whatever the weights' dtype, as Mixtral does.
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


def rotary_cos_sin(positions: Tensor, head_dim: int, theta: float) -> tuple[Tensor, Tensor]:
    """cos and sin ``[N, D]`` for each token's position (the "rotate half" layout)."""
    inv_freq = 1.0 / theta ** (
        torch.arange(0, head_dim, 2, device=positions.device).float() / head_dim
    )
    angles = positions.float()[:, None] * inv_freq[None, :]  # [N, D/2]
    angles = torch.cat([angles, angles], dim=-1)  # [N, D]
    return angles.cos(), angles.sin()


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate ``x [N, heads, D]``: pairs (i, i + D/2) turn by their position's angle."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return (x * cos[:, None, :] + rotated * sin[:, None, :]).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, cfg: MoEConfig, slot: int):
        super().__init__()
        self.slot = slot
        self.num_heads, self.num_kv_heads, self.head_dim = (
            cfg.num_heads,
            cfg.num_kv_heads,
            cfg.head_dim,
        )
        self.q_proj = nn.Linear(cfg.hidden_size, cfg.num_heads * cfg.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.hidden_size, cfg.num_kv_heads * cfg.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.hidden_size, cfg.num_kv_heads * cfg.head_dim, bias=False)
        self.o_proj = nn.Linear(cfg.num_heads * cfg.head_dim, cfg.hidden_size, bias=False)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, attend: AttentionFn) -> Tensor:
        n = x.shape[0]
        q = self.q_proj(x).view(n, self.num_heads, self.head_dim)
        k = self.k_proj(x).view(n, self.num_kv_heads, self.head_dim)
        v = self.v_proj(x).view(n, self.num_kv_heads, self.head_dim)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        out = attend(self.slot, q, k, v)  # [N, H, D]
        return self.o_proj(out.reshape(n, self.num_heads * self.head_dim))


class Expert(nn.Module):
    """SwiGLU: w2(silu(w1 x) * w3 x), Mixtral's names."""

    def __init__(self, cfg: MoEConfig):
        super().__init__()
        self.w1 = nn.Linear(cfg.hidden_size, cfg.expert_hidden_size, bias=False)
        self.w2 = nn.Linear(cfg.expert_hidden_size, cfg.hidden_size, bias=False)
        self.w3 = nn.Linear(cfg.hidden_size, cfg.expert_hidden_size, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


@dataclass
class Routing:
    """One MoE layer's routing of N tokens."""

    tokens_per_expert: Tensor  # [E] int64: token-slots routed to each expert (N * top_k in all)
    aux_loss: Tensor  # scalar: Switch Transformer load-balancing loss, E * sum(f_e * P_e)


@dataclass
class Dispatch:
    """How one MoE layer's N tokens go to its experts: the router's top-k, and the N*k
    (token, expert) pairs sorted by expert (expert 0's first)."""

    probs: Tensor  # [N, E] float32: the router's softmax
    weights: Tensor  # [N, k] in x's dtype: each token's top-k probabilities, summing to 1
    order: Tensor  # [N*k]: the pairs (token-major, as weights.flatten()) in expert order
    token_of_pair: Tensor  # [N*k]: the token of each pair, in expert order
    tokens_per_expert: Tensor  # [E] int64: pairs routed to each expert


class MoE(nn.Module):
    """Top-k of E experts per token. ``expert`` builds one expert: Mixtral's by default; the
    hybrid model passes Qwen's SwiGLU, whose weights have other names."""

    def __init__(self, cfg: Any, layer: int, expert: Callable[[], nn.Module] | None = None):
        super().__init__()
        self.layer = layer
        self.top_k = cfg.top_k
        self.gate = nn.Linear(cfg.hidden_size, cfg.num_experts, bias=False)
        make = expert or (lambda: Expert(cfg))
        self.experts = nn.ModuleList(make() for _ in range(cfg.num_experts))
        # Added to the router logits when set: how a benchmark forces routing skew, as
        # Megatron's moe_router_force_biased does. A tensor [E], or a function of this
        # micro-batch's logits returning one. Not a weight; never saved.
        self.router_bias: Tensor | Callable[[int, Tensor], Tensor] | None = None
        self.runner: OpRunner = DIRECT

    def forward(self, x: Tensor) -> tuple[Tensor, Routing]:
        d = self.route(x)
        self.runner.after_routing(self.layer, d.tokens_per_expert)
        x_grouped = x[d.token_of_pair]  # [N*k, C], expert 0's tokens first
        out_grouped = torch.empty_like(x_grouped)
        start = 0
        for e, count in enumerate(d.tokens_per_expert.tolist()):
            if count:
                group = x_grouped[start : start + count]
                out_grouped[start : start + count] = self.runner.run(
                    ("expert", self.layer, e), self.experts[e], group
                )
            start += count
        y = self.combine(x, out_grouped, d)  # [N, C]
        return y, Routing(d.tokens_per_expert, self.aux_loss(d))

    def route(self, x: Tensor) -> Dispatch:
        """The router's top-k of ``x [N, C]``, its N*k (token, expert) pairs grouped by expert."""
        logits = self.gate(x)  # [N, E]
        if callable(self.router_bias):
            logits = logits + self.router_bias(self.layer, logits.detach())
        elif self.router_bias is not None:
            logits = logits + self.router_bias
        probs = F.softmax(logits, dim=-1, dtype=torch.float)
        weights, chosen = probs.topk(self.top_k, dim=-1)  # [N, k]
        weights = (weights / weights.sum(dim=-1, keepdim=True)).to(x.dtype)

        # Group the N*k (token, expert) pairs by expert so each expert runs one matmul
        # over all its tokens.
        flat_expert = chosen.flatten()  # [N*k]
        order = flat_expert.argsort(stable=True)
        token_of_pair = order // self.top_k
        tokens_per_expert = torch.bincount(flat_expert, minlength=len(self.experts))
        return Dispatch(probs, weights, order, token_of_pair, tokens_per_expert)

    def combine(self, x: Tensor, out_grouped: Tensor, d: Dispatch) -> Tensor:
        """Each token's output ``[N, C]``: its k experts' outputs (``out_grouped [N*k, C]``,
        in the order of ``d.order``) weighted and summed."""
        out_grouped = out_grouped * d.weights.flatten()[d.order, None]
        return torch.zeros_like(x).index_add_(0, d.token_of_pair, out_grouped)

    def aux_loss(self, d: Dispatch) -> Tensor:
        """Switch Transformer's load-balancing loss: E * sum(f_e * P_e), f_e the fraction of
        the N*k token-slots routed to expert e, P_e its mean router probability."""
        n, num_experts = d.probs.shape[0], len(self.experts)
        fraction_routed = d.tokens_per_expert.float() / max(n * self.top_k, 1)
        return num_experts * (fraction_routed * d.probs.mean(dim=0)).sum()


class Block(nn.Module):
    """Pre-norm transformer layer: attention, then the mixture of experts."""

    def __init__(self, cfg: MoEConfig, slot: int):
        super().__init__()
        self.slot = slot
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg, slot)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.block_sparse_moe = MoE(cfg, slot)
        self.runner: OpRunner = DIRECT

    def forward(
        self, x: Tensor, cos: Tensor, sin: Tensor, attend: AttentionFn
    ) -> tuple[Tensor, Routing]:
        return self.runner.run(("layer", self.slot, -1), self._layer, x, cos, sin, attend)

    def _layer(
        self, x: Tensor, cos: Tensor, sin: Tensor, attend: AttentionFn
    ) -> tuple[Tensor, Routing]:
        x = x + self.runner.run(("attention", self.slot, -1), self._attention, x, cos, sin, attend)
        moe_out, routing = self.block_sparse_moe(self.post_attention_layernorm(x))
        return x + moe_out, routing

    def _attention(self, x: Tensor, cos: Tensor, sin: Tensor, attend: AttentionFn) -> Tensor:
        return self.self_attn(self.input_layernorm(x), cos, sin, attend)


class MTPModule(nn.Module):
    """DeepSeek-V3 MTP: h' = W [norm(h_prev); norm(emb(token))], then one transformer block."""

    def __init__(self, cfg: MoEConfig, slot: int):
        super().__init__()
        self.hnorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.enorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.eh_proj = nn.Linear(2 * cfg.hidden_size, cfg.hidden_size, bias=False)
        self.block = Block(cfg, slot)
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)  # before the shared head


@dataclass
class ModelOutput:
    logits: Tensor  # [B, T, V]
    hidden: Tensor  # [B, T, C] last layer's output, before the final norm
    tokens_per_expert: Tensor  # [L, E] int64, main layers
    aux_loss: Tensor  # mean load-balancing loss over the main layers
    loss: Tensor | None = None  # next-token cross-entropy when targets are given
    mtp_loss: Tensor | None = None  # MTP module 0's cross-entropy (predicting t+2 from h_t)


def causal_attention(batch: int, seq_len: int) -> AttentionFn:
    """Dense causal attention over a ``[batch, seq_len]`` batch laid out flat."""

    def attend(slot: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        def heads_first(t: Tensor) -> Tensor:  # [B*T, h, D] -> [B, h, T, D]
            return t.view(batch, seq_len, t.shape[1], t.shape[2]).transpose(1, 2)

        out = F.scaled_dot_product_attention(
            heads_first(q), heads_first(k), heads_first(v), is_causal=True, enable_gqa=True
        )
        return out.transpose(1, 2).reshape(batch * seq_len, q.shape[1], q.shape[2])

    return attend


class Decoder(nn.Module):
    """The main stack, under the names of Hugging Face's Mixtral (``model.embed_tokens``,
    ``model.layers.N``, ``model.norm``), so that checkpoints load by name."""

    def __init__(self, cfg: MoEConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(Block(cfg, slot) for slot in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class MoETransformer(nn.Module):
    def __init__(self, cfg: MoEConfig):
        super().__init__()
        self.config = cfg
        self.model = Decoder(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.mtp = nn.ModuleList(MTPModule(cfg, cfg.num_layers + d) for d in range(cfg.mtp_depth))
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def set_runner(self, runner: OpRunner) -> None:
        """Route every operator (main layers and MTP modules) through ``runner``."""
        for module in self.modules():
            if isinstance(module, (Block, MoE)):
                module.runner = runner

    @property
    def blocks(self) -> list[Block]:
        """The main layers in order (an nn.ModuleList yields them as plain Modules)."""
        return [cast(Block, block) for block in self.model.layers]

    def mtp_module(self, depth: int) -> MTPModule:
        return cast(MTPModule, self.mtp[depth])

    @property
    def num_slots(self) -> int:
        """Attention slots a KV cache needs: main layers, then MTP modules."""
        return self.config.num_layers + self.config.mtp_depth

    def mtp_slot(self, depth: int) -> int:
        """MTP module ``depth``'s attention slot."""
        return self.config.num_layers + depth

    # -- the flat interface the serving engine drives --------------------------------------

    def forward_flat(
        self, tokens: Tensor, positions: Tensor, attend: AttentionFn
    ) -> tuple[Tensor, list[Routing]]:
        """Main layers over ``tokens [N]`` at ``positions [N]``: hidden ``[N, C]`` (pre-norm)."""
        cos, sin = rotary_cos_sin(positions, self.config.head_dim, self.config.rope_theta)
        x = self.model.embed_tokens(tokens)
        routings = []
        for block in self.blocks:
            x, routing = block(x, cos, sin, attend)
            routings.append(routing)
        return x, routings

    def logits(self, hidden: Tensor) -> Tensor:
        return self.lm_head(self.model.norm(hidden))

    def mtp_forward(
        self,
        depth: int,
        hidden_prev: Tensor,
        tokens: Tensor,
        positions: Tensor,
        attend: AttentionFn,
    ) -> Tensor:
        """MTP module ``depth`` at the positions of ``tokens``: from the hidden state one
        position earlier and this token's embedding, a state that predicts the next token.
        Returns ``[N, C]`` before the module's norm; chain it as the next ``hidden_prev``."""
        module = self.mtp_module(depth)
        cos, sin = rotary_cos_sin(positions, self.config.head_dim, self.config.rope_theta)
        combined = torch.cat(
            [module.hnorm(hidden_prev), module.enorm(self.model.embed_tokens(tokens))], dim=-1
        )
        x, _ = module.block(module.eh_proj(combined), cos, sin, attend)
        return x

    def mtp_logits(self, depth: int, mtp_hidden: Tensor) -> Tensor:
        return self.lm_head(self.mtp_module(depth).norm(mtp_hidden))

    # -- the batch interface training and tests use ----------------------------------------

    def forward(self, idx: Tensor, targets: Tensor | None = None) -> ModelOutput:
        """``idx [B, T]`` token ids; ``targets [B, T]`` the next tokens (-100 ignored)."""
        batch, seq_len = idx.shape
        attend = causal_attention(batch, seq_len)
        positions = torch.arange(seq_len, device=idx.device).repeat(batch)
        hidden, routings = self.forward_flat(idx.flatten(), positions, attend)
        return batch_output(self, idx, targets, hidden, routings, attend)


class _BatchModel(Protocol):
    config: Any

    def logits(self, hidden: Tensor) -> Tensor: ...

    def mtp_forward(
        self,
        depth: int,
        hidden_prev: Tensor,
        tokens: Tensor,
        positions: Tensor,
        attend: AttentionFn,
    ) -> Tensor: ...

    def mtp_logits(self, depth: int, mtp_hidden: Tensor) -> Tensor: ...


def batch_output(
    model: _BatchModel,
    idx: Tensor,
    targets: Tensor | None,
    hidden: Tensor,
    routings: list[Routing],
    attend: AttentionFn,
) -> ModelOutput:
    """A ``[B, T]`` batch's outputs from its main layers' flat ``hidden`` (either
    reference model): logits, routing, and with ``targets`` the losses."""
    batch, seq_len = idx.shape
    logits = model.logits(hidden)
    out = ModelOutput(
        logits=logits.view(batch, seq_len, -1),
        hidden=hidden.view(batch, seq_len, -1),
        tokens_per_expert=torch.stack([r.tokens_per_expert for r in routings]),
        aux_loss=torch.stack([r.aux_loss for r in routings]).mean(),
    )
    if targets is None:
        return out
    out.loss = F.cross_entropy(logits.float(), targets.flatten(), ignore_index=-100)
    if model.config.mtp_depth:
        # Entry t sees h_{t-1} (zeros at t = 0) and token t, and predicts token t+1:
        # the main model's target at t, without the main model's h_t.
        positions = torch.arange(seq_len, device=idx.device).repeat(batch)
        h = hidden.view(batch, seq_len, -1)
        h_prev = torch.cat([torch.zeros_like(h[:, :1]), h[:, :-1]], dim=1).flatten(0, 1)
        mtp_hidden = model.mtp_forward(0, h_prev, idx.flatten(), positions, attend)
        out.mtp_loss = F.cross_entropy(
            model.mtp_logits(0, mtp_hidden).float(), targets.flatten(), ignore_index=-100
        )
    return out
