"""The collectives a rank runs, each timed into the step's ``CommTimes``.

Time in a collective is the data's transfer plus the wait for the slowest peer; the two are
told apart where ranks first meet: the token-count exchange before each all-to-all and the
barrier before the gradient all-reduce are ``wait_s`` (a few bytes: their time is the wait),
the payload after them is ``all_to_all_s`` / ``all_reduce_s``. A pipeline ``recv`` waits for
its neighbour's compute (the bubble) and the transfer together: ``pipeline_s``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor


@dataclass
class CommTimes:
    """One step's time in communication, in seconds, and the bytes moved."""

    all_to_all_s: float = 0.0  # token dispatch and combine, forward and backward
    pipeline_s: float = 0.0  # send/recv between stages, waiting for the neighbour included
    all_reduce_s: float = 0.0  # gradient sums, the clip norm, the loss
    wait_s: float = 0.0  # meeting the other ranks before a collective
    all_to_all_bytes: int = 0  # sent to other ranks (not to itself), both directions
    pipeline_bytes: int = 0  # sent to the neighbouring stages
    all_reduce_bytes: int = 0  # this rank's buffers summed

    @property
    def total_s(self) -> float:
        return self.all_to_all_s + self.pipeline_s + self.all_reduce_s + self.wait_s


@dataclass
class ExpertTraffic:
    """One step's expert-parallel token movement, per layer (main layers only)."""

    # tokens_per_local_expert[layer][i]: token-slots this rank's i-th expert received
    tokens_per_local_expert: dict[int, list[int]] = field(default_factory=dict)
    dispatched_tokens: dict[int, int] = field(default_factory=dict)  # sent, to itself too
    received_tokens: dict[int, int] = field(default_factory=dict)

    def add(self, layer: int, local_loads: list[int], dispatched: int, received: int) -> None:
        mine = self.tokens_per_local_expert.setdefault(layer, [0] * len(local_loads))
        for i, load in enumerate(local_loads):
            mine[i] += load
        self.dispatched_tokens[layer] = self.dispatched_tokens.get(layer, 0) + dispatched
        self.received_tokens[layer] = self.received_tokens.get(layer, 0) + received


def _nbytes(tensor: Tensor) -> int:
    return tensor.numel() * tensor.element_size()


class Comm:
    """A rank's collectives over its groups; every call adds its time to ``times``."""

    def __init__(self, rank: int, groups: dict[tuple[int, ...], Any]):
        self.rank = rank
        self._groups = groups  # member ranks -> process group
        self.times = CommTimes()
        # False while backward runs: a layer recomputed there moves its tokens again (their
        # time counts) but they are the forward's, already counted in ExpertTraffic.
        self.counting = True

    def new_step(self) -> CommTimes:
        done, self.times = self.times, CommTimes()
        return done

    def group(self, members: list[int]) -> Any:
        return self._groups[tuple(members)]

    def exchange_counts(self, send: Tensor, members: list[int]) -> Tensor:
        """``send [ranks, ...]`` (int64) -> what every rank sent to this one, same shape."""
        received = torch.empty_like(send)
        started = time.monotonic_ns()
        dist.all_to_all_single(received, send.contiguous(), group=self.group(members))
        self.times.wait_s += (time.monotonic_ns() - started) / 1e9
        return received

    def all_to_all(
        self, x: Tensor, out_splits: list[int], in_splits: list[int], members: list[int]
    ) -> Tensor:
        """Rows of ``x`` split by ``in_splits`` go to the group's ranks in order; the result
        holds ``out_splits`` rows from each. Differentiable: backward sends the gradients
        back the way the rows came."""
        result: Tensor = _AllToAll.apply(x, out_splits, in_splits, members, self)
        return result

    def _all_to_all(
        self, x: Tensor, out_splits: list[int], in_splits: list[int], members: list[int]
    ) -> Tensor:
        x = x.contiguous()
        out = x.new_empty((sum(out_splits), *x.shape[1:]))
        started = time.monotonic_ns()
        dist.all_to_all_single(out, x, out_splits, in_splits, group=self.group(members))
        self.times.all_to_all_s += (time.monotonic_ns() - started) / 1e9
        me = members.index(self.rank)
        row_bytes = _nbytes(x[:1]) if x.shape[0] else 0
        self.times.all_to_all_bytes += (sum(in_splits) - in_splits[me]) * row_bytes
        return out

    def send(self, tensor: Tensor, dst: int) -> Any:
        """Post a send to stage rank ``dst``; the caller waits on it (``wait_sends``)."""
        started = time.monotonic_ns()
        work = dist.isend(tensor.contiguous(), dst)
        self.times.pipeline_s += (time.monotonic_ns() - started) / 1e9
        self.times.pipeline_bytes += _nbytes(tensor)
        return work

    def recv(self, like: Tensor, src: int) -> Tensor:
        out = torch.empty_like(like)
        started = time.monotonic_ns()
        dist.recv(out, src)
        self.times.pipeline_s += (time.monotonic_ns() - started) / 1e9
        return out

    def wait_sends(self, works: list[Any]) -> None:
        if not works:
            return
        started = time.monotonic_ns()
        for work in works:
            work.wait()
        self.times.pipeline_s += (time.monotonic_ns() - started) / 1e9

    def barrier(self) -> None:
        started = time.monotonic_ns()
        dist.barrier()
        self.times.wait_s += (time.monotonic_ns() - started) / 1e9

    def all_reduce_sum(self, buffer: Tensor, members: list[int]) -> None:
        """Sum ``buffer`` in place over ``members`` (nothing to do for a group of one)."""
        if len(members) < 2:
            return
        started = time.monotonic_ns()
        dist.all_reduce(buffer, op=dist.ReduceOp.SUM, group=self.group(members))
        self.times.all_reduce_s += (time.monotonic_ns() - started) / 1e9
        self.times.all_reduce_bytes += _nbytes(buffer)


def ping_pong(tensor: Tensor, peer: int, lead: bool, reps: int = 20, warmup: int = 2) -> float:
    """The one-way time of ``tensor`` to ``peer`` and back, halved, best of ``reps`` after
    ``warmup`` (the link alone: both ranks wait here for nothing else). The ``lead`` rank
    sends first and times; the other returns what it gets. Returns seconds (the leader's
    measure; 0.0 on the other side)."""
    buffer = torch.empty_like(tensor)
    best = float("inf")
    for i in range(warmup + reps):
        started = time.monotonic_ns()
        if lead:
            dist.send(tensor, peer)
            dist.recv(buffer, peer)
        else:
            dist.recv(buffer, peer)
            dist.send(buffer, peer)
        if i >= warmup:
            best = min(best, (time.monotonic_ns() - started) / 2e9)
    return best if lead else 0.0


class _AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        x: Tensor,
        out_splits: list[int],
        in_splits: list[int],
        members: list[int],
        comm: Comm,
    ) -> Tensor:
        ctx.splits, ctx.members, ctx.comm = (out_splits, in_splits), members, comm
        return comm._all_to_all(x, out_splits, in_splits, members)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        out_splits, in_splits = ctx.splits
        back = ctx.comm._all_to_all(grad, in_splits, out_splits, ctx.members)
        return back, None, None, None, None


def make_groups(all_groups: list[list[int]]) -> dict[tuple[int, ...], Any]:
    """Create every group (all ranks call this with the same list, in the same order)."""
    world = list(range(dist.get_world_size()))
    groups: dict[tuple[int, ...], Any] = {tuple(world): dist.group.WORLD}
    for members in all_groups:
        group = dist.new_group(members)
        if dist.get_rank() in members:
            groups[tuple(members)] = group
    return groups
