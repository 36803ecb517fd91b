"""Named models and clusters a simulation spec can use instead of spelling them out.

Models:

- ``moe-188b`` and ``moe-1.04t``: our assumptions in the class of seed 000's two models
  (it gives their sizes, 188B and 1.04T, not their shapes): DeepSeek-V3-like GQA MoEs
  with one shared expert, top-8 routing and 4,096-token sequences. 187.0B and 1.028T
  parameters as counted by ``SimModel.parameters``.
- ``deepseek-v3``, ``qwen3-235b-a22b``, ``qwen3-30b-a3b``: the published Hugging Face
  config.json files (targets/cluster_sim/configs/, trimmed to the fields read, by
  hf_config.py; Qwen3-30B-A3B counts 30.5B parameters, 3.35B active, as published).

Clusters (per device; links one direction; efficiencies are assumptions until calibrated):

- ``h100``: H100 SXM, 989.4 TFLOP/s dense BF16 and 1,978.9 dense FP8 (NVIDIA's H100
  datasheet; its 1,979 / 3,958 TFLOP/s FP8 figures are dense / with sparsity), 80 GB
  HBM3 at 3.35 TB/s, NVLink 4 at 450 GB/s per direction in an 8-GPU domain, one 400 Gb/s
  InfiniBand NIC per GPU (50 GB/s), PCIe 5 x16 to the host (64 GB/s raw, 55 reachable).
- ``h800``: the H100's compute and memory with NVLink cut to 400 GB/s both ways (200 per
  direction), as DeepSeek-V3's report describes its cluster (arXiv:2412.19437, 3.1).
- ``b200``: DGX B200, eight B200 GPUs in one NVLink 5 domain: 2,250 TFLOP/s dense BF16 and
  4,500 dense FP8 (MXFP8 runs at the FP8 rate) per GPU at 1,000 W (NVIDIA's Blackwell
  architecture technical brief, HGX variant; DGX B200's datasheet: "72 PFLOPS" FP8
  training for 8 GPUs, i.e. 9,000 sparse = 4,500 dense each), 180 GB HBM3e at 8 TB/s (the
  datasheet's 1,440 GB and 64 TB/s over 8), NVLink 5 at 900 GB/s per direction (14.4 TB/s
  over 8, both directions), one 400 Gb/s ConnectX-7 per GPU (50 GB/s), PCIe 5 to the host.
- ``gb200``: GB200 NVL72, 72 B200 GPUs in one NVLink 5 domain: 2,500 TFLOP/s dense BF16
  and 5,000 dense FP8 per GPU at 1,200 W (the technical brief's GB200 variant; NVL72's
  "720 PF FP8" and "360 PF BF16" are with sparsity, over 72 GPUs), 186 GB HBM3e at 8 TB/s
  (the rack's 13.4 TB over 72), NVLink 5 at 900 GB/s per direction, one 400 Gb/s
  ConnectX-7 per GPU, NVLink-C2C to Grace (900 GB/s both ways for two GPUs: 225 GB/s per
  GPU and direction).
- ``seed-000``: seed 000's accelerator as far as its figures define it: 2.012 EFLOPS at
  32.9% MFU on 12,288 devices is 497.6 TFLOP/s of peak per device; memory (64 GB), HBM
  and link speeds are our assumptions (the seed gives none).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from moeperf.targets.cluster_sim.config import Cluster, ClusterSimConfigError, SimModel
from moeperf.targets.cluster_sim.hf_config import CONFIGS_DIR, sim_model_from_hf

SEED_PEAK_FLOPS_PER_S = 2.012e18 / 0.329 / 12_288  # seed 000: total / MFU / devices

_ASSUMED_MODELS = {
    "moe-188b": SimModel(
        num_layers=48, hidden_size=5120, num_heads=40, num_kv_heads=8, head_dim=128,
        num_experts=160, top_k=8, expert_hidden_size=1536, vocab_size=160_000, seq_len=4096,
        shared_experts=1,
    ),
    "moe-1.04t": SimModel(
        num_layers=64, hidden_size=7168, num_heads=64, num_kv_heads=8, head_dim=128,
        num_experts=384, top_k=8, expert_hidden_size=1920, vocab_size=160_000, seq_len=4096,
        shared_experts=1,
    ),
}  # fmt: skip
_HF_MODELS = {
    "deepseek-v3": "deepseek-v3.json",
    "qwen3-235b-a22b": "qwen3-235b-a22b.json",
    "qwen3-30b-a3b": "qwen3-30b-a3b.json",
}

_H100 = Cluster(
    devices=8, peak_flops_per_s=989.4e12, memory_bytes=80e9, hbm_bytes_per_s=3.35e12,
    scale_up_domain=8, scale_up_bytes_per_s=450e9, scale_out_bytes_per_s=50e9,
    host_link_bytes_per_s=55e9, fp8_peak_flops_per_s=1978.9e12,
)  # fmt: skip
CLUSTERS = {
    "h100": _H100,
    "h800": dataclasses.replace(_H100, scale_up_bytes_per_s=200e9),
    "b200": Cluster(
        devices=8, peak_flops_per_s=2250e12, memory_bytes=180e9, hbm_bytes_per_s=8e12,
        scale_up_domain=8, scale_up_bytes_per_s=900e9, scale_out_bytes_per_s=50e9,
        host_link_bytes_per_s=55e9, fp8_peak_flops_per_s=4500e12,
    ),
    "gb200": Cluster(
        devices=72, peak_flops_per_s=2500e12, memory_bytes=186e9, hbm_bytes_per_s=8e12,
        scale_up_domain=72, scale_up_bytes_per_s=900e9, scale_out_bytes_per_s=50e9,
        host_link_bytes_per_s=225e9, fp8_peak_flops_per_s=5000e12,
    ),
    "seed-000": Cluster(
        devices=12_288, peak_flops_per_s=SEED_PEAK_FLOPS_PER_S, memory_bytes=64e9,
        hbm_bytes_per_s=1.6e12, scale_up_domain=64, scale_up_bytes_per_s=100e9,
        scale_out_bytes_per_s=25e9, host_link_bytes_per_s=32e9,
    ),
}  # fmt: skip
MODEL_NAMES = (*_ASSUMED_MODELS, *_HF_MODELS)


def model(name: str, seq_len: int | None = None) -> SimModel:
    """A named model, or a path to a Hugging Face config.json; ``seq_len`` overrides."""
    if name in _ASSUMED_MODELS:
        found = _ASSUMED_MODELS[name]
        return found if seq_len is None else dataclasses.replace(found, seq_len=seq_len)
    if name in _HF_MODELS:
        return sim_model_from_hf(CONFIGS_DIR / _HF_MODELS[name], seq_len=seq_len)
    path = Path(name).expanduser()
    if path.suffix == ".json" and path.is_file():
        return sim_model_from_hf(path, seq_len=seq_len)
    raise ClusterSimConfigError(
        f"unknown model {name!r}; valid: {', '.join(MODEL_NAMES)}, or a path to a Hugging "
        "Face config.json"
    )


def cluster(name: str) -> Cluster:
    """A named cluster's device and links (``devices`` is set by the job)."""
    if name not in CLUSTERS:
        raise ClusterSimConfigError(f"unknown cluster {name!r}; valid: {', '.join(CLUSTERS)}")
    return CLUSTERS[name]
