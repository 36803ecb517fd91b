"""Device memory as a budget the trainer runs against: real on a GPU, accounted on a CPU.

BaGuaLu-2's problem is an out-of-memory crash when a skewed micro-batch's activations overflow
the device, so the trainer needs a budget that can be crossed. Two share one interface
(``track``, ``offload``, ``set_static``, ``saved_bytes``, ``in_use_bytes``, ``peak_bytes``,
``stats``, ``reset_peak``, ``reset``, ``oom_errors``):

- ``CudaBudget``: the real caching allocator capped with
  ``torch.cuda.set_per_process_memory_fraction``; crossing it raises
  ``torch.cuda.OutOfMemoryError`` itself.
- ``AccountedBudget``: a CPU has no device to fill, so memory is accounted::

      in use = static        parameters + gradients + AdamW state (``training_static_bytes``)
             + saved         activations autograd keeps for backward, counted by storage
             + working set   transient allocations of one forward+backward (calibrated)

  and crossing the limit raises ``AccountedOutOfMemoryError``, a ``torch.OutOfMemoryError``
  (which is ``torch.cuda.OutOfMemoryError``), so one ``except OOM_ERRORS`` handles both.

Saved activations are counted with autograd's saved-tensor hooks inside ``track()``: pack
counts a tensor's whole storage (what stays allocated) once however many ops save it, and the
handle it returns gives the bytes back when autograd drops it: after backward used it, or
when an unused graph is freed. Open ``track()`` around backward too, so that what a reentrant
checkpoint recomputes there is counted. ``torch.utils.checkpoint(use_reentrant=False)`` saves
its inputs through our hooks but recomputes in backward under hooks of its own, which ours
cannot see (one checkpointed operator's activations at a time);
``memory_calibrate.calibrate_working_set`` run under the same policy folds those into the
working set.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.optim import Optimizer

from moeperf.targets.training.memory_offload import HostOffloader, is_static

# torch.OutOfMemoryError is torch.cuda.OutOfMemoryError; ours subclasses it, so this one name
# catches a real OOM and an accounted one alike.
OOM_ERRORS: tuple[type[BaseException], ...] = (torch.OutOfMemoryError,)

UNLIMITED_BYTES = 2**63 - 1  # an AccountedBudget(None): accounts, never raises


class AccountedOutOfMemoryError(torch.OutOfMemoryError):
    """An accounted budget was crossed: handle it exactly as a CUDA out-of-memory error."""

    def __init__(self, message: str, *, requested_bytes: int, in_use_bytes: int, limit_bytes: int):
        super().__init__(message)
        self.requested_bytes = requested_bytes
        self.in_use_bytes = in_use_bytes
        self.limit_bytes = limit_bytes


@dataclass(frozen=True)
class StaticBytes:
    """What stays resident for the whole run."""

    params_bytes: int = 0
    grads_bytes: int = 0
    optimizer_bytes: int = 0

    @property
    def total_bytes(self) -> int:
        return self.params_bytes + self.grads_bytes + self.optimizer_bytes


def training_static_bytes(model: nn.Module, optimizer: Optimizer | None = None) -> StaticBytes:
    """Parameters, their gradients, and Adam(W)'s moments for each parameter it updates.

    Gradients count from step 0: once the first backward allocates them they stay (or, with
    ``zero_grad(set_to_none=True)``, come back in every backward, where the peak is). Adam's
    moments are ``zeros_like(param)``: the parameter's dtype (fp32 for an fp32 model), two per
    parameter, three with amsgrad; its ``step`` scalars (4 bytes each) are left out. Without
    an optimizer, AdamW over every trainable parameter is assumed.
    """
    params = list(model.parameters())  # shared parameters are listed once
    trainable = [p for p in params if p.requires_grad]
    if optimizer is None:
        updated = [(p, 2) for p in trainable]
    elif isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW)):
        updated = [
            (p, 3 if group.get("amsgrad") else 2)
            for group in optimizer.param_groups
            for p in group["params"]
        ]
    else:
        raise TypeError(f"optimizer state is accounted for Adam and AdamW, not {optimizer!r}")
    return StaticBytes(
        params_bytes=sum(_nbytes(p) for p in params),
        grads_bytes=sum(_nbytes(p) for p in trainable),
        optimizer_bytes=sum(moments * _nbytes(p) for p, moments in updated),
    )


def _nbytes(tensor: Tensor) -> int:
    return tensor.numel() * tensor.element_size()


@dataclass(frozen=True)
class MemoryStats:
    limit_bytes: int
    static: StaticBytes
    saved_current_bytes: int  # saved activations alive now (device side)
    saved_peak_bytes: int  # since the last reset_peak
    working_set_bytes: int  # the calibrated allowance (0 on CUDA: the allocator is real)
    in_use_bytes: int  # accounted total now; on CUDA torch.cuda.memory_allocated
    peak_total_bytes: int  # since the last reset_peak; on CUDA torch.cuda.max_memory_allocated
    packed_bytes: int  # saved-activation storages counted since construction or reset()
    released_bytes: int  # ... and given back
    offloaded_bytes: int  # copied to host by offload() since construction
    host_peak_bytes: int  # host copies alive at once, since the last reset_peak
    copy_s: float  # offload copy time, both directions


class _Saved:
    """What autograd keeps for a tracked activation; its death releases the bytes."""

    __slots__ = ("_generation", "_key", "_ledger", "tensor")

    def __init__(self, ledger: _SavedLedger, tensor: Tensor, key: int, generation: int):
        self._ledger, self.tensor, self._key, self._generation = ledger, tensor, key, generation

    def __del__(self) -> None:
        self._ledger.release(self._key, self._generation)


class _SavedLedger:
    """Saved-activation bytes by storage: a refcount per storage, so each counts once."""

    def __init__(self, admit: Callable[[int, int], None]):
        # admit(storage key, bytes) raises, before anything is recorded, if they do not fit
        self._admit = admit
        self._lock = threading.RLock()  # CUDA backward releases on its own thread; GC may too
        self._refs: dict[int, tuple[int, int]] = {}  # storage data_ptr -> (saves alive, bytes)
        self._generation = 0  # handles from before a reset() release nothing
        self.current_bytes = self.peak_bytes = self.packed_bytes = self.released_bytes = 0

    def pack(self, tensor: Tensor) -> Tensor | _Saved:
        if is_static(tensor):
            return tensor.detach()  # counted in the static bytes
        storage = tensor.untyped_storage()
        key, nbytes = storage.data_ptr(), storage.nbytes()
        with self._lock:
            count = self._refs.get(key, (0, nbytes))[0]
            if count == 0:
                self._admit(key, nbytes)
                self.current_bytes += nbytes
                self.packed_bytes += nbytes
                self.peak_bytes = max(self.peak_bytes, self.current_bytes)
            self._refs[key] = (count + 1, nbytes)
            generation = self._generation
        # Detached: an output saved with its own grad_fn would otherwise form a cycle through
        # autograd's C++ graph that Python's collector cannot see.
        return _Saved(self, tensor.detach(), key, generation)

    @staticmethod
    def unpack(packed: Tensor | _Saved) -> Tensor:
        return packed if isinstance(packed, Tensor) else packed.tensor

    def release(self, key: int, generation: int) -> None:
        with self._lock:
            if generation != self._generation:
                return
            count, nbytes = self._refs[key]
            if count > 1:
                self._refs[key] = (count - 1, nbytes)
                return
            del self._refs[key]
            self.current_bytes -= nbytes
            self.released_bytes += nbytes

    def live(self) -> dict[int, int]:
        """Storage data_ptr -> bytes of every saved storage alive now."""
        with self._lock:
            return {key: nbytes for key, (_, nbytes) in self._refs.items()}

    def reset_peak(self) -> None:
        self.peak_bytes = self.current_bytes

    def reset(self) -> None:
        with self._lock:
            self._generation += 1
            self._refs.clear()
            self.current_bytes = self.peak_bytes = self.packed_bytes = self.released_bytes = 0


class _Budget:
    """The interface both budgets share (the trainer's and policies' ``MemoryBudget``)."""

    oom_errors = OOM_ERRORS
    limit_bytes: int
    working_set_bytes: int = 0

    def __init__(self) -> None:
        self.static = StaticBytes()
        self._ledger = _SavedLedger(admit=self._admit)
        self._offloader = HostOffloader()

    @contextmanager
    def track(self) -> Iterator[None]:
        """Count every activation autograd saves inside the block (forward and backward)."""
        with torch.autograd.graph.saved_tensors_hooks(self._ledger.pack, self._ledger.unpack):
            yield

    def offload(self) -> AbstractContextManager[HostOffloader]:
        """Copy what autograd saves inside the block to host memory, off the device budget.

        Nest it inside ``track()`` around the operators to offload: innermost hooks win.
        """
        return self._offloader.hooks()

    def set_static(self, model: nn.Module, optimizer: Optimizer | None = None) -> None:
        """Account ``model``'s parameters, gradients and ``optimizer``'s state."""
        s = training_static_bytes(model, optimizer)
        self.set_static_bytes(s.params_bytes, s.grads_bytes, s.optimizer_bytes)

    def set_static_bytes(self, params_bytes: int, grads_bytes: int, optimizer_bytes: int) -> None:
        self.static = StaticBytes(params_bytes, grads_bytes, optimizer_bytes)

    def saved_bytes(self) -> int:
        """Saved activations alive now (counted inside ``track()``)."""
        return self._ledger.current_bytes

    def check(self, extra_bytes: int = 0, what: str = "nothing more") -> None:
        """Raise an out-of-memory error if ``extra_bytes`` more would cross the limit."""

    def _admit(self, key: int, nbytes: int) -> None:
        pass

    def stats(self) -> MemoryStats:
        offload = self._offloader.stats()
        return MemoryStats(
            limit_bytes=self.limit_bytes,
            static=self.static,
            saved_current_bytes=self._ledger.current_bytes,
            saved_peak_bytes=self._ledger.peak_bytes,
            working_set_bytes=self.working_set_bytes,
            in_use_bytes=self.in_use_bytes(),
            peak_total_bytes=self.peak_bytes(),
            packed_bytes=self._ledger.packed_bytes,
            released_bytes=self._ledger.released_bytes,
            offloaded_bytes=offload.offloaded_bytes,
            host_peak_bytes=offload.host_peak_bytes,
            copy_s=offload.copy_s,
        )

    def in_use_bytes(self) -> int:
        raise NotImplementedError

    def peak_bytes(self) -> int:
        raise NotImplementedError

    def reset_peak(self) -> None:
        """Start a new step's peaks from what is in use now."""
        self._ledger.reset_peak()
        self._offloader.reset_peak()

    def reset(self) -> None:
        """Forget every saved activation still counted (after an OOM whose graph is gone)."""
        self._ledger.reset()
        self.reset_peak()


class AccountedBudget(_Budget):
    """An accounted device: static + saved activations + working set, against a limit."""

    def __init__(self, limit_bytes: int | None, *, working_set_bytes: int = 0):
        if (limit_bytes is not None and limit_bytes <= 0) or working_set_bytes < 0:
            raise ValueError("limit_bytes must be positive and working_set_bytes not negative")
        super().__init__()
        self.limit_bytes = UNLIMITED_BYTES if limit_bytes is None else limit_bytes
        self.working_set_bytes = working_set_bytes
        self._peak_total_bytes = 0

    def in_use_bytes(self) -> int:
        return self.static.total_bytes + self._ledger.current_bytes + self.working_set_bytes

    def peak_bytes(self) -> int:
        return self._peak_total_bytes

    def set_static_bytes(self, params_bytes: int, grads_bytes: int, optimizer_bytes: int) -> None:
        grown_bytes = params_bytes + grads_bytes + optimizer_bytes - self.static.total_bytes
        self.check(max(grown_bytes, 0), "parameters, gradients and optimizer state")
        super().set_static_bytes(params_bytes, grads_bytes, optimizer_bytes)

    def set_working_set(self, working_set_bytes: int) -> None:
        """Take the allowance from a calibration (``calibrate_working_set``)."""
        self.check(max(working_set_bytes - self.working_set_bytes, 0), "working set")
        self.working_set_bytes = working_set_bytes

    def check(self, extra_bytes: int = 0, what: str = "nothing more") -> None:
        in_use_bytes = self.in_use_bytes()
        if in_use_bytes + extra_bytes > self.limit_bytes:
            raise AccountedOutOfMemoryError(
                self._message(extra_bytes, what, in_use_bytes),
                requested_bytes=extra_bytes,
                in_use_bytes=in_use_bytes,
                limit_bytes=self.limit_bytes,
            )
        self._peak_total_bytes = max(self._peak_total_bytes, in_use_bytes + extra_bytes)

    def _admit(self, key: int, nbytes: int) -> None:
        self.check(nbytes, "a saved activation")

    def _message(self, extra_bytes: int, what: str, in_use_bytes: int) -> str:
        s = self.static
        return (
            f"Accounted device out of memory. Tried to allocate {_mib(extra_bytes)} ({what}). "
            f"The budget is {_mib(self.limit_bytes)}, of which "
            f"{_mib(max(self.limit_bytes - in_use_bytes, 0))} is free; "
            f"{_mib(in_use_bytes)} is in use: parameters {_mib(s.params_bytes)}, gradients "
            f"{_mib(s.grads_bytes)}, optimizer state {_mib(s.optimizer_bytes)}, saved "
            f"activations {_mib(self._ledger.current_bytes)}, working set "
            f"{_mib(self.working_set_bytes)}."
        )

    def reset_peak(self) -> None:
        super().reset_peak()
        self._peak_total_bytes = self.in_use_bytes()


class CudaBudget(_Budget):
    """The real device: the caching allocator capped at ``limit_bytes``.

    The cap applies to what the allocator reserves (allocated plus cached blocks), so
    fragmentation counts as it does in production; the CUDA context and other processes'
    memory do not. ``track()`` counts saved activations for the report only: the allocator
    raises ``torch.cuda.OutOfMemoryError`` on its own, so ``check`` does nothing.
    """

    def __init__(self, limit_bytes: int | None, device: torch.device | str = "cuda"):
        super().__init__()
        self.device = torch.device(device)
        if self.device.index is None:  # the allocator's calls want an index
            self.device = torch.device("cuda", torch.cuda.current_device())
        total_bytes = torch.cuda.get_device_properties(self.device).total_memory
        self.limit_bytes = total_bytes if limit_bytes is None else min(limit_bytes, total_bytes)
        torch.cuda.set_per_process_memory_fraction(self.limit_bytes / total_bytes, self.device)

    def in_use_bytes(self) -> int:
        return torch.cuda.memory_allocated(self.device)

    def peak_bytes(self) -> int:
        return torch.cuda.max_memory_allocated(self.device)

    def reset_peak(self) -> None:
        super().reset_peak()
        torch.cuda.reset_peak_memory_stats(self.device)

    def close(self) -> None:
        """Lift the cap (the fraction is process-wide state)."""
        torch.cuda.set_per_process_memory_fraction(1.0, self.device)


def _mib(nbytes: int) -> str:
    return f"{nbytes / 2**20:.2f} MiB"
