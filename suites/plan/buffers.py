"""Communication and allocator buffers: estimates, documented (docs/guides/memory-planning.md).

With N step tokens (activations.py), h hidden, k experts per token, a activation bytes:
  tensor-parallel all-reduce (tp > 1)     2 N h a   (input and output of a custom all-reduce)
  expert-parallel all-to-all (ep > 1)     2 N k h a (dispatch and combine, send side; the
                                                     receive side is the MoE activation term)
  pipeline send/recv (pp > 1)             2 N h a
  runtime reserve                         runtime_reserve_gib (CUDA context, cuBLAS
                                          workspaces, CUDA graphs; default 1 GiB)
  allocator headroom                      allocator_fraction * device memory (default 5%,
                                          vLLM's gpu_memory_utilization = 0.9 keeps 10%)
"""

from __future__ import annotations

from dataclasses import dataclass

from moeperf.suites.plan.deploy import GIB, DeployConfig
from moeperf.suites.plan.dtypes import PLAIN_BYTES
from moeperf.suites.plan.model_config import ModelShape


@dataclass(frozen=True)
class BufferPlan:
    communication: int
    runtime_reserve: int
    allocator: int


def plan_buffers(m: ModelShape, d: DeployConfig) -> BufferPlan:
    a = PLAIN_BYTES[d.activation_dtype]
    n = max(d.chunked_prefill_tokens, d.decode_tokens)
    comm = 0
    if d.tp > 1:
        comm += 2 * n * m.hidden * a
    if d.ep > 1:
        comm += 2 * n * m.experts_per_token * m.hidden * a
    if d.pp > 1:
        comm += 2 * n * m.hidden * a
    return BufferPlan(
        communication=comm,
        runtime_reserve=int(d.runtime_reserve_gib * GIB),
        allocator=int(d.allocator_fraction * d.memory_bytes),
    )
