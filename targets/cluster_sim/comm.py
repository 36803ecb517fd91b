"""Seconds the expert-parallel all-to-all takes per routed slot, by dispatcher.

The expert group spans ``expert x expert_tensor`` devices (Megatron's expert ranks are
consecutive, tensor-parallel ones first under MoE parallel folding), so ``D`` scale-up
domains when it is wider than one. Routing is balanced within the group here; what skew
adds is in the hottest rank's slot count, which the caller multiplies by.

- ``alltoall``: every slot travels on its own; the ``(D - 1) / D`` of slots whose expert is
  in another domain cross the scale-out network, the rest the scale-up links, both at once.
- ``deepep``: a token crosses the scale-out network once per remote domain holding one of
  its experts, then fans out inside it; every slot crosses the scale-up links once. The
  expected number of remote domains a token reaches is the hypergeometric chance that at
  least one of its ``k`` experts (distinct, drawn uniformly) lives there; with DeepSeek's
  node-limited routing (the model's ``expert_groups`` equal to ``D``, a token restricted to
  ``expert_groups_per_token`` of them) it is drawn within the chosen groups. Its links run
  at what DeepEP measured, not at ``comm_efficiency``: its normal kernels' bottleneck
  bandwidth on H800 with one 400 Gb/s CX7 NIC per GPU (github.com/deepseek-ai/DeepEP,
  docs/legacy.md, "Normal kernels with NVLink and RDMA forwarding", DeepSeek-V3's
  setting): 43, 58 and 51 GB/s over RDMA at EP 16, 32 and 64 (the nearest EP size is
  taken, scaled by the cluster's NIC over 50 GB/s), 153 GB/s over NVLink of ~160 (0.96 of
  the scale-up link).
"""

from __future__ import annotations

import math

from moeperf.targets.cluster_sim.config import SimConfig


def _none_of(k: int, among: int, outside: int) -> float:
    """P(none of k distinct experts drawn from ``among`` falls in a set of ``outside``
    excluded from it), i.e. C(among - outside, k) / C(among, k)."""
    if k > among - outside:
        return 0.0
    return math.comb(among - outside, k) / math.comb(among, k)


def expert_domains(cfg: SimConfig) -> int:
    """Scale-up domains the expert group spans (1: it fits in one)."""
    span = cfg.parallel.expert * cfg.parallel.expert_tensor
    return max(1, math.ceil(span / cfg.cluster.scale_up_domain))


def remote_domains_per_token(cfg: SimConfig) -> float:
    """Expected remote domains one token's ``top_k`` experts are spread over (balanced)."""
    m, domains = cfg.model, expert_domains(cfg)
    if domains == 1:
        return 0.0
    experts, k = m.num_experts, m.top_k
    per_domain = experts // domains
    if m.expert_groups == domains and m.expert_groups_per_token < domains:
        chosen = m.expert_groups_per_token
        hit = 1 - _none_of(k, chosen * per_domain, per_domain)
        return (domains - 1) * chosen / domains * hit
    return (domains - 1) * (1 - _none_of(k, experts, per_domain))


# DeepEP's normal kernels, bytes/s over RDMA by expert-parallel size, with 50 GB/s NICs.
DEEPEP_RDMA_BYTES_PER_S = {16: 43e9, 32: 58e9, 64: 51e9}
DEEPEP_NIC_BYTES_PER_S = 50e9
DEEPEP_NVLINK_SHARE = 153 / 160


def deepep_bytes_per_s(cfg: SimConfig) -> tuple[float, float]:
    """(scale-out, scale-up) bytes/s DeepEP's normal kernels reach in this job."""
    cl = cfg.cluster
    span = cfg.parallel.expert * cfg.parallel.expert_tensor
    nearest = min(DEEPEP_RDMA_BYTES_PER_S, key=lambda ep: (abs(math.log2(span / ep)), ep))
    out = DEEPEP_RDMA_BYTES_PER_S[nearest] * cl.scale_out_bytes_per_s / DEEPEP_NIC_BYTES_PER_S
    return out, cl.scale_up_bytes_per_s * DEEPEP_NVLINK_SHARE


def a2a_seconds_per_slot(cfg: SimConfig, *, forward: bool) -> float:
    """Dispatch plus combine seconds of one routed slot the hottest rank receives.

    The forward dispatch may send FP8 (``recipe.fp8_dispatch``); the combine and both
    backward transfers are in the activations' own width."""
    m, cl, recipe = cfg.model, cfg.cluster, cfg.recipe
    e = m.bytes_per_element
    dispatch = recipe.dispatch_bytes_per_element(e) if forward else e
    bytes_per_slot = m.hidden_size * (dispatch + e)
    domains = expert_domains(cfg)
    out_bw = cl.scale_out_bytes_per_s * cl.comm_efficiency
    up_bw = cl.scale_up_bytes_per_s * cl.comm_efficiency
    if recipe.dispatcher == "deepep":
        out_bw, up_bw = deepep_bytes_per_s(cfg)
    if domains == 1:
        return bytes_per_slot / up_bw
    if recipe.dispatcher == "deepep":
        remote, local = remote_domains_per_token(cfg) / m.top_k, 1.0
    else:
        remote, local = (domains - 1) / domains, 1 / domains
    return bytes_per_slot * max(remote / out_bw, local / up_bw)
