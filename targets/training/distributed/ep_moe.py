"""An MoE layer whose experts live on several ranks: route here, dispatch each token-slot
to its expert's rank with an all-to-all, run the local experts, combine back.

GShard's and Megatron's token dispatcher, written out for one layer: the ranks first
exchange how many token-slots each sends to each of the other's experts (the realized
loads), then the slots themselves (``[slots, C]`` rows, grouped by destination rank, then
expert). Each rank runs its experts over everything it received, from every rank at once,
and sends the outputs back in the order they came; the weighted sum over a token's k
experts happens where the token lives, as in ``MoE.forward``. Parameter names are the
single-process model's (``experts.{global index}``), the other ranks' experts replaced by
empty placeholders, so a rank's state dict is a slice of the whole model's.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from moeperf.targets.model.moe import MoE, Routing
from moeperf.targets.training.distributed.comm import Comm, ExpertTraffic


class ExpertParallelMoE(MoE):
    def __init__(self, moe: MoE, local: range, members: list[int], comm: Comm):
        nn.Module.__init__(self)  # MoE's own __init__ would build every expert again
        self.layer, self.top_k = moe.layer, moe.top_k
        self.num_experts = len(moe.experts)
        self.gate = moe.gate
        self.experts = nn.ModuleList(
            moe.experts[e] if e in local else nn.Identity() for e in range(self.num_experts)
        )
        self.router_bias = moe.router_bias
        self.runner = moe.runner
        self.local = local
        self.members = members  # the expert group's ranks, in expert order
        self.comm = comm
        self.traffic = ExpertTraffic()

    def forward(self, x: Tensor) -> tuple[Tensor, Routing]:
        ranks, per_rank = len(self.members), len(self.local)
        # Slots grouped by expert, so by destination rank too (experts are in rank order).
        d = self.route(x)
        send_counts = d.tokens_per_expert.view(ranks, per_rank)  # [dst rank, its expert]
        recv_counts = self.comm.exchange_counts(send_counts, self.members)  # [src rank, mine]
        in_splits = send_counts.sum(dim=1).tolist()
        out_splits = recv_counts.sum(dim=1).tolist()
        received = self.comm.all_to_all(x[d.token_of_pair], out_splits, in_splits, self.members)

        local_loads = recv_counts.sum(dim=0)  # [per_rank] slots each local expert received
        if self.comm.counting:  # a forward, not its recompute in backward
            self.traffic.add(self.layer, local_loads.tolist(), sum(in_splits), sum(out_splits))
        loads = torch.zeros_like(d.tokens_per_expert)
        loads[self.local.start : self.local.stop] = local_loads
        self.runner.after_routing(self.layer, loads)  # this rank's policy, on its own loads

        # Received rows come by source rank, then expert: regroup them by expert.
        expert_of_row = (
            torch.arange(per_rank).repeat(ranks).repeat_interleave(recv_counts.flatten())
        )
        by_expert = expert_of_row.argsort(stable=True)
        grouped = received[by_expert]
        # When this rank's experts received nothing, the outputs must still come from the
        # received rows (zero of them), so that backward runs this rank's share of the
        # combine and dispatch all-to-alls: its peers wait in them.
        out_grouped = grouped * 0 if not grouped.shape[0] else torch.empty_like(grouped)
        start = 0
        for i, count in enumerate(local_loads.tolist()):
            if count:
                e = self.local.start + i
                out_grouped[start : start + count] = self.runner.run(
                    ("expert", self.layer, e), self.experts[e], grouped[start : start + count]
                )
            start += count
        back_in_order = out_grouped[by_expert.argsort()]  # by source rank again
        combined = self.comm.all_to_all(back_in_order, in_splits, out_splits, self.members)
        y = self.combine(x, combined, d)  # [N, C]
        return y, Routing(d.tokens_per_expert, self.aux_loss(d))

    def take_traffic(self) -> ExpertTraffic:
        done, self.traffic = self.traffic, ExpertTraffic()
        return done
