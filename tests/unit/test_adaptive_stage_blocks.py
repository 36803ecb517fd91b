"""The adaptive policy on a pipeline stage predicts over the blocks the stage runs: the
layers another stage holds save nothing here, so they are neither in its predicted peak
nor among what it may choose to recompute."""

from __future__ import annotations

import contextlib

import torch

from moeperf.targets.training.policies import AdaptivePolicy, CostModel, OpCost

TOKENS = 100
COST = CostModel(
    attention=OpCost(bytes_per_token=10.0, seconds_per_token=1e-6),
    expert=OpCost(bytes_per_token=4.0, seconds_per_token=1e-6),
    other_bytes=0,
    offload_seconds_per_byte=1.0,  # dearer than recompute: every choice recomputes
)


class FixedBudget:
    limit_bytes = 1_000

    def in_use_bytes(self) -> int:
        return 0

    def saved_bytes(self) -> int:
        return 0

    def offload(self) -> contextlib.nullcontext[None]:
        return contextlib.nullcontext()


def decide(blocks: tuple[int, ...] | None) -> dict:
    policy = AdaptivePolicy(FixedBudget(), COST, num_blocks=4, tokens_per_microbatch=TOKENS,
                            top_k=2, margin=0.0, blocks=blocks)  # fmt: skip
    policy.begin_microbatch()
    policy.after_routing(0, torch.tensor([100, 100]))  # 200 slots x 4 bytes in layer 0
    (decision,), _ = policy.take_decisions()
    return decision


def test_a_stage_predicts_only_its_own_later_blocks():
    whole = decide(None)  # layers 1-3 later: 3 x (1000 attention + 800 experts)
    stage = decide((0, 1))  # layer 1 only
    assert whole["predicted_peak_bytes"] == 800 + 3 * (1_000 + 800)
    assert stage["predicted_peak_bytes"] == 800 + 1 * (1_000 + 800)


def test_a_stage_recomputes_only_what_it_runs():
    chosen = {op["op"] for op in decide((0, 1))["ops"]}
    assert chosen and not any(op.startswith(("attention:2", "attention:3")) for op in chosen)
    assert {op["op"] for op in decide(None)["ops"]} & {"attention:2:-1", "attention:3:-1"}
