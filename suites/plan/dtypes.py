"""Bytes per element of each dtype the planner knows, with quantization scale overheads.

fp8 weights carry one fp32 scale per 128 x 128 block (DeepSeek-V3's fp8 checkpoint,
``weight_block_size = [128, 128]``): 1 + 4 / 16384 bytes per weight. int4 weights carry
one bf16 scale per group of 128 input elements, symmetric (no zero point; GPTQ / AWQ
group size 128 as compressed-tensors' w4a16 writes it): 0.5 + 2 / 128 bytes per weight.
Only the large matrices are quantized; embeddings, head, norms, routers, convolutions and
small vectors stay in "high precision": fp32 when the weights are fp32, bf16 otherwise.
"""

from __future__ import annotations

WEIGHT_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp8": 1.0 + 4.0 / (128 * 128), "int4": 0.5 + 2.0 / 128}
PLAIN_BYTES = {"fp32": 4, "bf16": 2, "fp8": 1}


def high_precision_bytes(weight_dtype: str) -> int:
    return 4 if weight_dtype == "fp32" else 2
