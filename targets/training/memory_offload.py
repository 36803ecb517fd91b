"""Offloading saved activations to host memory: autograd's saved-tensor hooks, timed.

Inside ``HostOffloader.hooks()`` every activation autograd saves for backward is copied to a
separate host tensor at pack time and copied back at unpack time (in backward), so the device
keeps no reference to it in between. On a CPU "device" the copy is a clone into another host
buffer: the same bytes move, so the copy time is real even though no bus is crossed. On CUDA it
is an asynchronous copy into pinned memory on the current stream (the ordering a later kernel
that reuses the freed device block needs), timed with CUDA events so the forward is not
stalled to measure it.

Parameters (and views of them) are never copied: they stay on the device for the optimizer and
are counted in a budget's static bytes.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn


def is_static(tensor: Tensor) -> bool:
    """True for a parameter or a view of one: resident for the whole run, not an activation.

    Linear layers save ``weight.t()``, a view whose ``_base`` is the parameter; a leaf that
    requires grad is a parameter in all but name (the trainer's tensors are all modules').
    """
    base = tensor._base if tensor._base is not None else tensor
    return isinstance(base, nn.Parameter) or (base.is_leaf and base.requires_grad)


@dataclass(frozen=True)
class OffloadStats:
    offloaded_bytes: int  # bytes copied to host since construction (each saved tensor once)
    host_current_bytes: int  # host copies alive now (waiting for their backward)
    host_peak_bytes: int
    copy_s: float  # device-to-host plus host-to-device copy time


class _HostCopy:
    """What autograd keeps instead of an offloaded activation: its host copy."""

    __slots__ = ("__weakref__", "_offloader", "device", "host", "nbytes")

    def __init__(self, offloader: HostOffloader, host: Tensor, device: torch.device):
        self._offloader, self.host, self.device = offloader, host, device
        self.nbytes = host.numel() * host.element_size()

    def __del__(self) -> None:
        # Autograd drops it after backward used it (or when the graph is freed unused).
        self._offloader._forget(self.nbytes)


class HostOffloader:
    """Counts and times the host copies of offloaded activations."""

    def __init__(self) -> None:
        self._lock = threading.RLock()  # CUDA backward runs on its own thread; GC may too
        self._offloaded_bytes = self._host_current_bytes = self._host_peak_bytes = 0
        self._copy_s = 0.0
        self._cuda_events: list[tuple[Any, Any]] = []  # (start, end) of async copies
        # The same tensor saved by several ops (x by the q, k and v projections) is copied
        # once: id -> (the tensor, its copy), both weak, valid while the tensor is alive.
        self._copies: dict[int, tuple[weakref.ref[Tensor], weakref.ref[_HostCopy]]] = {}

    @contextmanager
    def hooks(self) -> Iterator[HostOffloader]:
        """Offload everything autograd saves inside the block (innermost hooks win)."""
        try:
            with torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
                yield self
        finally:
            self._copies.clear()

    def stats(self) -> OffloadStats:
        self._resolve_cuda_timings()
        with self._lock:
            return OffloadStats(
                self._offloaded_bytes,
                self._host_current_bytes,
                self._host_peak_bytes,
                self._copy_s,
            )

    def reset_peak(self) -> None:
        with self._lock:
            self._host_peak_bytes = self._host_current_bytes

    # -- the hooks ------------------------------------------------------------------------

    def _pack(self, tensor: Tensor) -> Tensor | _HostCopy:
        if is_static(tensor):
            return tensor.detach()  # detached: no reference cycle through its grad_fn
        seen = self._copies.get(id(tensor))
        if seen is not None and seen[0]() is tensor and (copy := seen[1]()) is not None:
            return copy
        copy = _HostCopy(self, self._copy(tensor.detach(), to_host=True), tensor.device)
        self._copies[id(tensor)] = (weakref.ref(tensor), weakref.ref(copy))
        with self._lock:
            self._offloaded_bytes += copy.nbytes
            self._host_current_bytes += copy.nbytes
            self._host_peak_bytes = max(self._host_peak_bytes, self._host_current_bytes)
        return copy

    def _unpack(self, packed: Tensor | _HostCopy) -> Tensor:
        if isinstance(packed, Tensor):
            return packed
        return self._copy(packed.host, to_host=False, device=packed.device)

    def _forget(self, nbytes: int) -> None:
        with self._lock:
            self._host_current_bytes -= nbytes

    # -- the copies -----------------------------------------------------------------------

    def _copy(self, src: Tensor, *, to_host: bool, device: torch.device | None = None) -> Tensor:
        on_cuda = src.device.type == "cuda" or (device is not None and device.type == "cuda")
        if not on_cuda:
            started_s = time.perf_counter()
            out = src.clone(memory_format=torch.contiguous_format)
            with self._lock:
                self._copy_s += time.perf_counter() - started_s
            return out
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        if to_host:
            out = torch.empty(src.shape, dtype=src.dtype, pin_memory=True)
            out.copy_(src, non_blocking=True)
        else:
            out = src.to(device, non_blocking=True)
        end.record()
        with self._lock:
            self._cuda_events.append((start, end))
        return out

    def _resolve_cuda_timings(self) -> None:
        with self._lock:
            events, self._cuda_events = self._cuda_events, []
        if events:
            torch.cuda.synchronize()
            seconds = sum(start.elapsed_time(end) for start, end in events) / 1e3
            with self._lock:
                self._copy_s += seconds
