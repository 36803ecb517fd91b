"""What the training framework does with a layout: precision, dispatcher and overlaps.

A ``Recipe`` is the part of a published run that is neither the model, the layout nor the
hardware: the knobs of Megatron-LM / Transformer Engine / DeepEP its recipe turns on. Each
is off by default (the simulator's original assumptions: BF16, a plain all-to-all, no
communication overlapped with compute, the data-parallel reduction taken as hidden), and a
spec turns on only what the run it simulates used. Sources, one per option:

- ``precision = "fp8"``: the GEMMs of the transformer blocks (attention projections, the
  routed, shared and dense MLPs) run in FP8 at the device's FP8 peak and its own efficiency,
  as Transformer Engine's FP8 recipes do (DeepSeek-V3, arXiv:2412.19437 section 3.3:
  "the majority of core computation kernels, i.e., GEMM operations, are implemented in
  FP8"); attention's score and value products, the router and the output head stay BF16
  (Megatron's output layer is not a TE module; TE's fused attention is BF16 here).
- ``fp8_dispatch``: the all-to-all's dispatch sends FP8 activations plus one fp32 scale per
  128 elements; the combine stays BF16 (DeepSeek-V3 section 3.3.2, DeepEP's FP8 dispatch).
- ``dispatcher = "deepep"``: DeepEP's normal kernels (github.com/deepseek-ai/DeepEP): a
  token crosses the scale-out network once per remote scale-up domain that holds one of its
  experts and is forwarded to its experts inside the domain over the scale-up links, the two
  links running at once; ``"alltoall"`` sends every routed slot on its own (NCCL's
  all-to-all, Megatron's ``alltoall`` dispatcher).
- ``a2a_overlap``: the expert-parallel all-to-all of one micro-batch runs under another's
  compute, as in DualPipe (DeepSeek-V3 section 3.2.1) and Megatron-LM's
  ``--overlap-moe-expert-parallel-comm`` (1F1B A2A overlap, which pairs the forward of one
  micro-batch with the backward of another in the steady 1F1B phase). Warm-up and cool-down
  ops have no partner and keep their all-to-all exposed.
- ``tp_comm_overlap``: tensor-parallel all-gathers and reduce-scatters run under the GEMMs
  they feed (Megatron-LM ``--tp-comm-overlap``, Transformer Engine userbuffers).
- ``dp_comm``: the data-parallel gradient reduce-scatter and parameter all-gather (the
  distributed optimizer's, or FSDP's per micro-batch): ``"hidden"`` is not charged (the
  original assumption), ``"overlapped"`` runs under compute and charges only what does not
  fit (Megatron-LM ``--overlap-grad-reduce`` / ``--overlap-param-gather``, FSDP2's prefetch),
  ``"exposed"`` charges all of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Precision = Literal["bf16", "fp8"]
Dispatcher = Literal["alltoall", "deepep"]
DataParallelComm = Literal["hidden", "overlapped", "exposed"]
PRECISIONS: tuple[Precision, ...] = ("bf16", "fp8")
DISPATCHERS: tuple[Dispatcher, ...] = ("alltoall", "deepep")
DP_COMMS: tuple[DataParallelComm, ...] = ("hidden", "overlapped", "exposed")

FP8_SCALE_BYTES_PER_ELEMENT = 4 / 128  # one fp32 scale per 128 elements (1x128 tiles)


@dataclass(frozen=True)
class Recipe:
    """The framework's choices for one simulated job (module docstring: their sources)."""

    precision: Precision = "bf16"
    fp8_dispatch: bool = False
    dispatcher: Dispatcher = "alltoall"
    a2a_overlap: bool = False
    tp_comm_overlap: bool = False
    dp_comm: DataParallelComm = "hidden"

    def dispatch_bytes_per_element(self, element_bytes: int) -> float:
        """Bytes one hidden-state element takes on the wire in the dispatch."""
        return 1 + FP8_SCALE_BYTES_PER_ELEMENT if self.fp8_dispatch else float(element_bytes)
