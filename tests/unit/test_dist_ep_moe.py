"""The expert-parallel MoE layer must run every all-to-all its peers run, backward included:
a rank that skips one leaves its peers' collective paired with the wrong message.

One rank of a two-rank expert group, in one process: ``PeerlessComm`` stands in for the
group, its peer sending this rank no token-slots (and zeros where a reply is due), and
counts the all-to-alls the layer runs."""

from __future__ import annotations

import torch
from torch import Tensor

from moeperf.targets.model.config import MoEConfig
from moeperf.targets.model.moe import MoE
from moeperf.targets.training.distributed.comm import Comm
from moeperf.targets.training.distributed.ep_moe import ExpertParallelMoE

CFG = MoEConfig(hidden_size=16, expert_hidden_size=16, num_experts=4, top_k=2, num_heads=4)
ME, MEMBERS = 1, [0, 1]  # this rank holds experts 2 and 3; rank 0 holds 0 and 1


class PeerlessComm(Comm):
    def __init__(self) -> None:
        super().__init__(ME, {})
        self.all_to_alls: list[tuple[list[int], list[int]]] = []

    def exchange_counts(self, send: Tensor, members: list[int]) -> Tensor:
        received = torch.zeros_like(send)
        received[ME] = send[ME]  # what this rank sends itself; the peer sends nothing
        return received

    def _all_to_all(
        self, x: Tensor, out_splits: list[int], in_splits: list[int], members: list[int]
    ) -> Tensor:
        self.all_to_alls.append((list(out_splits), list(in_splits)))
        start = sum(in_splits[:ME])
        mine = x[start : start + in_splits[ME]]  # the rows this rank sends itself
        assert out_splits[ME] == in_splits[ME]
        return torch.cat([x.new_zeros((out_splits[0], *x.shape[1:])), mine])


def _run(bias: list[float]) -> tuple[PeerlessComm, Tensor]:
    torch.manual_seed(0)
    moe = MoE(CFG, layer=0)
    moe.router_bias = torch.tensor(bias)  # every token picks the two experts biased up
    comm = PeerlessComm()
    layer = ExpertParallelMoE(moe, range(2, 4), MEMBERS, comm)
    x = torch.randn(8, CFG.hidden_size, requires_grad=True)
    y, _ = layer(x)
    y.pow(2).sum().backward()
    return comm, y


def test_tokens_for_local_experts_run_dispatch_and_combine_both_ways():
    comm, y = _run([-50.0, -50.0, 50.0, 50.0])
    slots = 8 * CFG.top_k
    assert comm.all_to_alls == [
        ([0, slots], [0, slots]),  # dispatch
        ([0, slots], [0, slots]),  # combine
        ([0, slots], [0, slots]),  # combine's backward
        ([0, slots], [0, slots]),  # dispatch's backward
    ]
    assert y.abs().sum() > 0


def test_a_rank_whose_experts_receive_nothing_still_runs_the_backward_all_to_alls():
    comm, _ = _run([50.0, 50.0, -50.0, -50.0])  # every slot goes to the peer's experts
    slots = 8 * CFG.top_k
    forward = [([0, 0], [slots, 0]), ([slots, 0], [0, 0])]  # dispatch, combine
    assert comm.all_to_alls[:2] == forward
    assert len(comm.all_to_alls) == 4  # the two backwards, as the peer runs them
