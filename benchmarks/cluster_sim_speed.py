"""How fast the cluster simulator runs: 100 iterations of the 12,288-device 1.04T job of the
shipped ``training-sim-scale`` spec (preset moe-1.04t on seed 000's accelerator, context 2,
pipeline 16, expert 64, 32 micro-batches per pipeline) per activation policy under spiky
routing, wall seconds on this machine (target: under 10 s each). The MFUs it prints are
simulated; the decision time is the dual-batch planner's, measured on this host.
"""

from __future__ import annotations

import time

import numpy as np
from rich.console import Console
from rich.table import Table

from moeperf.specs import load_spec
from moeperf.targets.cluster_sim.simulate import SIM_POLICIES, JobSpec, simulate

JOB = "1.04T x 12,288"
ITERATIONS = 100


def main() -> None:
    spec = load_spec("training-sim-scale").simulation
    config = next(j for j in spec.job if j.name == JOB).config()
    size = f"{config.cluster.devices:,} devices, {config.model.parameters() / 1e12:.2f}T parameters"
    table = Table(title=f"cluster_sim: {ITERATIONS} iterations, {size} (simulated figures)")
    heads = ("policy", "wall s", "simulated MFU", "OOM rate", "peak GB", "plan ms p50")
    for column in heads:
        table.add_column(column, justify="left" if column == "policy" else "right")
    for policy in SIM_POLICIES:
        started = time.perf_counter()
        result = simulate(config, JobSpec(policy=policy, skew="spiky", iterations=ITERATIONS))
        wall_s = time.perf_counter() - started
        peak = max(float(r.peak_memory_bytes.max()) for r in result.iterations)
        mfu = f"{result.mfu_mean:.1%}" if result.completed else "- (all OOM)"
        plans = [r.decision_s for r in result.iterations if r.decision_s > 0]
        plan = f"{np.median(plans) * 1e3:.1f}" if plans else "-"
        table.add_row(policy, f"{wall_s:.2f}", mfu, f"{result.oom_rate:.2f}",
                      f"{peak / 1e9:.1f}", plan)  # fmt: skip
    Console().print(table)


if __name__ == "__main__":
    main()
