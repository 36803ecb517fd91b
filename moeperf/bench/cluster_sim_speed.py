"""How fast the cluster simulator runs: 100 iterations of a 12,288-device, ~1.1T-parameter
MoE job per activation policy, wall seconds on this machine (target: under 10 s each).

The model and cluster are our assumptions in the spirit of seed 000 (which gives neither):
64 layers, hidden 7168, 384 experts top-8 of width 2048 plus one shared, 4,096 tokens;
~498 TFLOP/s devices (2.012 EFLOPS / 32.9% / 12,288, seed 000's figures), 64 GB, PP 16,
EP 64, 32 micro-batches per pipeline, spiky routing. The MFUs it prints are simulated.
"""

from __future__ import annotations

import time

from rich.console import Console
from rich.table import Table

from targets.cluster_sim.config import Cluster, Parallel, SimConfig, SimModel
from targets.cluster_sim.simulate import SIM_POLICIES, JobSpec, simulate

MODEL = SimModel(num_layers=64, hidden_size=7168, num_heads=64, num_kv_heads=8, head_dim=128,
                 num_experts=384, top_k=8, expert_hidden_size=2048, vocab_size=160_000,
                 seq_len=4096, shared_experts=1)  # fmt: skip
CLUSTER = Cluster(devices=12_288, peak_flops_per_s=498e12, memory_bytes=64e9,
                  hbm_bytes_per_s=1.6e12, scale_up_domain=64, scale_up_bytes_per_s=100e9,
                  scale_out_bytes_per_s=25e9, host_link_bytes_per_s=32e9)  # fmt: skip
CONFIG = SimConfig(MODEL, Parallel(pipeline=16, expert=64), CLUSTER, global_batch=768 * 32,
                   micro_batch=1)  # fmt: skip
ITERATIONS = 100


def main() -> None:
    size = f"{CLUSTER.devices:,} devices, {MODEL.parameters() / 1e12:.2f}T parameters"
    table = Table(title=f"cluster_sim: {ITERATIONS} iterations, {size} (simulated figures)")
    for column in ("policy", "wall s", "simulated MFU", "OOM rate", "peak GB"):
        table.add_column(column, justify="left" if column == "policy" else "right")
    for policy in SIM_POLICIES:
        started = time.perf_counter()
        result = simulate(CONFIG, JobSpec(policy=policy, skew="spiky", iterations=ITERATIONS))
        wall_s = time.perf_counter() - started
        peak = max(float(r.peak_memory_bytes.max()) for r in result.iterations)
        mfu = f"{result.mfu_mean:.1%}" if result.completed else "- (all OOM)"
        table.add_row(policy, f"{wall_s:.2f}", mfu, f"{result.oom_rate:.2f}", f"{peak / 1e9:.1f}")
    Console().print(table)


if __name__ == "__main__":
    main()
