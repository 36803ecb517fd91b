"""The peak bytes of tensors a piece of torch code creates and keeps alive at once.

A ``TorchDispatchMode`` sees every aten operator's outputs: a storage no input shares is
new, and counts until it is freed (its weak reference expires). The peak of that sum is
what the code held at once beyond what existed before (weights, the KV cache): its
activations. Scratch a kernel allocates and frees inside one operator (the workspace of a
fused attention kernel) is not an output and is not seen; on a GPU,
``torch.cuda.max_memory_allocated`` would see it too. The planner's activation estimate is
checked against this count (tests/unit/test_plan_activations.py).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


class LiveTensorBytes(TorchDispatchMode):
    """``with LiveTensorBytes() as live: ...``; then ``live.peak_bytes``."""

    def __init__(self) -> None:
        super().__init__()
        self._live: dict[int, tuple[StorageWeakRef, int]] = {}  # data_ptr -> (ref, bytes)
        self.current_bytes = 0
        self.peak_bytes = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        self._drop_freed()
        inputs = {
            t.untyped_storage().data_ptr()
            for t in tree_leaves((args, kwargs))
            if isinstance(t, torch.Tensor)
        }
        for tensor in tree_leaves(out):
            if not isinstance(tensor, torch.Tensor):
                continue
            storage = tensor.untyped_storage()
            key, size = storage.data_ptr(), storage.nbytes()
            # A view or an in-place result shares an input's storage: nothing new.
            if size == 0 or key in inputs or key in self._live:
                continue
            self._live[key] = (StorageWeakRef(storage), size)
            self.current_bytes += size
        self.peak_bytes = max(self.peak_bytes, self.current_bytes)
        return out

    def _drop_freed(self) -> None:
        for key, (ref, size) in list(self._live.items()):
            if ref.expired():
                del self._live[key]
                self.current_bytes -= size
