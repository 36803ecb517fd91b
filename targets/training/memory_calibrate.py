"""Measuring the working set: the transient bytes of one micro-batch's forward and backward
that are neither saved activations nor gradients (targets.training.memory's allowance)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch._C._profiler import _ExtraFields_Allocation
from torch.autograd.profiler import profile, record_function

from moeperf.targets.training.memory import _SavedLedger


@dataclass(frozen=True)
class WorkingSetCalibration:
    working_set_bytes: int  # the allowance: most bytes held at once by neither saved nor grads
    peak_allocated_bytes: int  # most bytes the step's own allocations held at once
    saved_peak_bytes: int  # the ledger's peak of saved activations during the step
    saved_allocated_bytes: int  # allocations the profiler saw that were saved (not the batch)
    grads_bytes: int  # gradients backward allocated
    measured: bool  # False: the profiler gave no memory events, the allowance is estimated


_PACK_MARK = "moeperf.saved."  # + storage data_ptr: a profiler event where a storage is counted
ESTIMATE_LARGEST_SAVED_MULTIPLE = 3  # the fallback: e.g. logits, their log-softmax, its grad


def calibrate_working_set(
    model: nn.Module, forward_loss: Callable[[], Tensor]
) -> WorkingSetCalibration:
    """Measure one forward+backward's transient allocations beyond saved activations and grads.

    ``forward_loss()`` runs the model (with the runner, i.e. the policy, it will train with) on
    a typical micro-batch and returns the loss. Forward and backward run under
    ``torch.profiler`` with ``profile_memory=True``, whose allocation events (pointer, size,
    time) give every allocation's lifetime, and the ledger marks in the same timeline when it
    counts each saved storage. A lifetime holding such a mark is a saved activation; one alive
    at the end at a ``.grad``'s pointer is a gradient; the rest are the working set: returned
    logits, temporaries, incoming gradients, and what a non-reentrant checkpoint recomputes
    under its own hooks. Its largest instant total is the allowance, so that static + peak
    saved + allowance bounds the step's real peak. Gradients are set to None for the step (as
    ``zero_grad`` does) and restored after it.
    """
    params = list(model.parameters())
    kept_grads = [p.grad for p in params]
    ledger = _SavedLedger(admit=_mark_counted)
    try:
        for p in params:
            p.grad = None
        hooks = torch.autograd.graph.saved_tensors_hooks(ledger.pack, ledger.unpack)
        # torch.autograd.profiler's kineto profile, which torch.profiler.profile wraps: the
        # wrapper's start asks hasattr(torch, "_inductor"), which imports the compiler
        # (1.2-1.4 CPU-s in every rank process that calibrates, measured; nothing else here
        # uses it). Same events: CPU activity and memory.
        with profile(use_kineto=True, profile_memory=True) as prof, hooks:
            loss = forward_loss()
            largest_saved_bytes = max(ledger.live().values(), default=0)
            loss.backward()
            del loss
        grads = {
            p.grad.untyped_storage().data_ptr(): p.grad.untyped_storage().nbytes()
            for p in params
            if p.grad is not None
        }
    finally:
        for p, grad in zip(params, kept_grads, strict=True):
            p.grad = grad
    device = params[0].device if params else torch.device("cpu")
    allocations, marks = _profiled_events(prof, device)
    if not allocations:
        return WorkingSetCalibration(
            working_set_bytes=ESTIMATE_LARGEST_SAVED_MULTIPLE * largest_saved_bytes,
            peak_allocated_bytes=0,
            saved_peak_bytes=ledger.peak_bytes,
            saved_allocated_bytes=0,
            grads_bytes=sum(grads.values()),
            measured=False,
        )
    return _sweep(allocations, marks, grads, ledger.peak_bytes)


def _mark_counted(key: int, nbytes: int) -> None:
    """Admit everything while calibrating, marking in the profile when each storage counts."""
    with record_function(f"{_PACK_MARK}{key}"):
        pass


def _profiled_events(
    prof: profile, device: torch.device
) -> tuple[list[tuple[int, int, int]], dict[int, list[int]]]:
    """``device``'s allocations as (time_ns, ptr, signed bytes), and ptr -> times counted."""
    allocations: list[tuple[int, int, int]] = []
    marks: dict[int, list[int]] = {}
    results = prof.kineto_results
    assert results is not None, "read once the profile has stopped"
    stack = list(results.experimental_event_tree())
    while stack:
        node = stack.pop()
        stack.extend(node.children)
        if node.name.startswith(_PACK_MARK):
            marks.setdefault(int(node.name[len(_PACK_MARK) :]), []).append(node.start_time_ns)
        elif node.name == "[memory]":
            fields = node.extra_fields  # an allocation's, for a "[memory]" event
            if isinstance(fields, _ExtraFields_Allocation) and fields.device.type == device.type:
                allocations.append((node.start_time_ns, fields.ptr, fields.alloc_size))
    return sorted(allocations), marks


def _sweep(
    allocations: list[tuple[int, int, int]],
    marks: dict[int, list[int]],
    grads: dict[int, int],
    saved_peak_bytes: int,
) -> WorkingSetCalibration:
    """Pair allocations with frees into lifetimes, classify them, find the peaks."""
    open_: dict[int, tuple[int, int]] = {}  # ptr -> (allocated at, bytes)
    lifetimes: list[tuple[int, int | None, int, int]] = []  # (start, end or None, ptr, bytes)
    for time_ns, ptr, size in allocations:
        if size > 0:
            open_[ptr] = (time_ns, size)
        elif ptr in open_:  # frees of blocks allocated before the step are not its memory
            start_ns, nbytes = open_.pop(ptr)
            lifetimes.append((start_ns, time_ns, ptr, nbytes))
    lifetimes += [(start_ns, None, ptr, nbytes) for ptr, (start_ns, nbytes) in open_.items()]

    changes: list[tuple[int, int, bool]] = []  # (time, signed bytes, is working set)
    saved_allocated_bytes = 0
    for start_ns, end_ns, ptr, nbytes in lifetimes:
        is_saved = any(start_ns <= t and (end_ns is None or t < end_ns) for t in marks.get(ptr, ()))
        saved_allocated_bytes += nbytes if is_saved else 0
        temporary = not is_saved and not (ptr in grads and end_ns is None)
        changes.append((start_ns, nbytes, temporary))
        if end_ns is not None:
            changes.append((end_ns, -nbytes, temporary))
    total_bytes = working_bytes = peak_bytes = peak_working_bytes = 0
    for _, delta, temporary in sorted(changes, key=lambda c: (c[0], c[1])):  # frees first
        total_bytes += delta
        working_bytes += delta if temporary else 0
        peak_bytes = max(peak_bytes, total_bytes)
        peak_working_bytes = max(peak_working_bytes, working_bytes)
    return WorkingSetCalibration(
        working_set_bytes=peak_working_bytes,
        peak_allocated_bytes=peak_bytes,
        saved_peak_bytes=saved_peak_bytes,
        saved_allocated_bytes=saved_allocated_bytes,
        grads_bytes=sum(grads.values()),
        measured=True,
    )
