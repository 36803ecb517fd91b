"""The device-memory budget (targets.training.memory), checked against torch's own numbers."""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from moeperf.targets.model import MoEConfig, MoETransformer
from moeperf.targets.model.moe import Routing
from moeperf.targets.model.op_runner import DIRECT, Op
from moeperf.targets.training.memory import (
    OOM_ERRORS,
    AccountedBudget,
    AccountedOutOfMemoryError,
    CudaBudget,
    training_static_bytes,
)
from moeperf.targets.training.memory_calibrate import calibrate_working_set

SMALL = MoEConfig(
    vocab_size=512, hidden_size=64, expert_hidden_size=32, num_layers=4, num_heads=4,
    num_kv_heads=2, num_experts=4, top_k=2, max_position=128, mtp_depth=1,
)  # fmt: skip
BATCH, SEQ_LEN = 4, 64
# Autograd saves a Python number multiplied into a tensor (``0.01 * aux``) as a 0-dim CPU
# "wrapped number" tensor without calling saved-tensor hooks; these are its dtypes.
WRAPPED_NUMBER_DTYPES = (torch.float64, torch.int64, torch.complex128, torch.bool)


def small_model(seed: int = 0) -> MoETransformer:
    torch.manual_seed(seed)
    return MoETransformer(SMALL)


def batch(seed: int = 1) -> tuple[Tensor, Tensor]:
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randint(SMALL.vocab_size, (BATCH, SEQ_LEN), generator=g),
        torch.randint(SMALL.vocab_size, (BATCH, SEQ_LEN), generator=g),
    )


def total_loss(model: MoETransformer, idx: Tensor, targets: Tensor) -> Tensor:
    out = model(idx, targets)
    return out.loss + 0.3 * out.mtp_loss + 0.01 * out.aux_loss


def saved_tensor_bytes(loss: Tensor, model: torch.nn.Module) -> tuple[int, int]:
    """Torch's own view of what autograd keeps: (activation bytes, wrapped-number bytes).

    Walks ``loss.grad_fn``'s graph through ``next_functions`` and sums the unique storages of
    every tensor a node exposes as ``_saved_*`` (``_raw_saved_*`` are the same tensors as
    SavedVariable objects), leaving out the model's parameters, and reporting apart the
    0-dim wrapped numbers that saved-tensor hooks never see.
    """
    param_storages = {p.untyped_storage().data_ptr() for p in model.parameters()}
    activations: dict[int, int] = {}
    wrapped: dict[int, int] = {}
    seen, stack = set(), [loss.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        for name in dir(node):
            if not name.startswith("_saved_"):
                continue
            value = getattr(node, name)
            for t in value if isinstance(value, (tuple, list)) else (value,):
                if not isinstance(t, Tensor):
                    continue
                storage = t.untyped_storage()
                if storage.data_ptr() in param_storages:
                    continue
                is_wrapped = t.dim() == 0 and t.dtype in WRAPPED_NUMBER_DTYPES
                (wrapped if is_wrapped else activations)[storage.data_ptr()] = storage.nbytes()
        stack.extend(fn for fn, _ in node.next_functions)
    return sum(activations.values()), sum(wrapped.values())


class LayerCheckpoint:
    """Every transformer layer under torch.utils.checkpoint (full recompute)."""

    def __init__(self, reentrant: bool):
        self.reentrant = reentrant

    def after_routing(self, layer: int, tokens_per_expert: Tensor) -> None:
        pass

    def run(self, op: Op, fn: Callable[..., Any], *args: Any) -> Any:
        if op[0] != "layer":
            return fn(*args)
        x, cos, sin, attend = args

        def tensors_only(x: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor, Tensor]:
            y, routing = fn(x, cos, sin, attend)
            return y, routing.aux_loss, routing.tokens_per_expert

        y, aux_loss, tokens_per_expert = checkpoint(
            tensors_only, x, cos, sin, use_reentrant=self.reentrant
        )
        return y, Routing(tokens_per_expert, aux_loss)


def train_step(model: MoETransformer, budget: AccountedBudget) -> list[Tensor]:
    """Forward and backward under ``budget.track()``; the gradients, cloned."""
    model.zero_grad(set_to_none=True)
    idx, targets = batch()
    with budget.track():
        total_loss(model, idx, targets).backward()
    return [grad_of(p).clone() for p in model.parameters()]


def grad_of(param: Tensor) -> Tensor:
    assert param.grad is not None, "after a backward every parameter has a gradient"
    return param.grad


# -- errors and static bytes ---------------------------------------------------------------


def test_accounted_oom_is_a_torch_oom():
    assert issubclass(AccountedOutOfMemoryError, torch.OutOfMemoryError)
    assert torch.cuda.OutOfMemoryError in OOM_ERRORS
    with pytest.raises(OOM_ERRORS):
        raise AccountedOutOfMemoryError("x", requested_bytes=1, in_use_bytes=1, limit_bytes=1)


def test_static_bytes_are_what_adamw_and_backward_allocate():
    model = small_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    static = training_static_bytes(model, optimizer)
    train_step(model, AccountedBudget(None))
    optimizer.step()
    moments = [
        t for state in optimizer.state.values() for k, t in state.items() if k != "step"
    ]  # the 4-byte step scalars are left out
    assert static.optimizer_bytes == sum(t.numel() * t.element_size() for t in moments)
    grads = [grad_of(p) for p in model.parameters()]
    assert static.grads_bytes == sum(g.numel() * g.element_size() for g in grads)
    assert static.params_bytes == static.grads_bytes  # fp32, all trainable
    with pytest.raises(TypeError, match="Adam"):
        training_static_bytes(model, torch.optim.SGD(model.parameters(), lr=0.1))


# -- saved activations against torch's graph -------------------------------------------------


def test_accounted_saved_bytes_equal_what_the_graph_keeps():
    idx, targets = batch()
    plain = small_model()
    torch_bytes, wrapped_bytes = saved_tensor_bytes(total_loss(plain, idx, targets), plain)

    model, budget = small_model(), AccountedBudget(None)
    with budget.track():
        loss = total_loss(model, idx, targets)
    # Exactly the graph's storages: each once, parameters left to the static bytes.
    assert budget.saved_bytes() == torch_bytes
    # The difference, exactly: the 8-byte wrapped numbers of ``0.3 *``, ``0.01 *`` and each
    # main layer's ``num_experts *`` (the MTP block's aux loss is dropped, its graph freed).
    assert wrapped_bytes == (2 + SMALL.num_layers) * 8
    # Also packed and already released: the MTP block's routed fractions [E] fp32, saved by
    # its aux loss, which the model drops (so autograd frees that branch in forward).
    stats = budget.stats()
    assert stats.saved_peak_bytes == torch_bytes
    assert stats.packed_bytes - stats.released_bytes == torch_bytes
    assert stats.released_bytes == SMALL.num_experts * 4
    del loss


def test_saved_bytes_are_released_by_backward_and_by_a_dropped_graph():
    model, budget = small_model(), AccountedBudget(None)
    train_step(model, budget)
    stats = budget.stats()
    assert stats.saved_current_bytes == 0
    assert stats.released_bytes == stats.packed_bytes > 0

    idx, targets = batch()
    with budget.track():
        loss = total_loss(model, idx, targets)
    assert budget.saved_bytes() > 0
    del loss  # no backward: freeing the graph frees what it saved
    assert budget.saved_bytes() == 0


def test_checkpointing_every_layer_cuts_the_saved_peak():
    keep = AccountedBudget(None)
    model = small_model()
    keep_grads = train_step(model, keep)

    reentrant = AccountedBudget(None)
    model.set_runner(LayerCheckpoint(reentrant=True))
    grads = train_step(model, reentrant)
    # Forward keeps only each layer's input; backward recomputes one layer at a time, and
    # with track() open around backward those saves are counted too.
    assert reentrant.stats().saved_peak_bytes < 0.4 * keep.stats().saved_peak_bytes
    assert reentrant.saved_bytes() == 0
    for g, k in zip(grads, keep_grads, strict=True):
        torch.testing.assert_close(g, k, rtol=0, atol=1e-6)

    # The non-reentrant form saves the same inputs through our hooks in forward.
    idx, targets = batch()
    forward_bytes = []
    for runner in (LayerCheckpoint(reentrant=True), LayerCheckpoint(reentrant=False)):
        budget = AccountedBudget(None)
        model.set_runner(runner)
        with budget.track():
            loss = total_loss(model, idx, targets)
        forward_bytes.append(budget.saved_bytes())
        del loss
    assert forward_bytes[0] == forward_bytes[1] > 0
    model.set_runner(DIRECT)


# -- crossing the budget ---------------------------------------------------------------------


def measured_peak_bytes(model: MoETransformer, working_set_bytes: int) -> int:
    budget = AccountedBudget(None, working_set_bytes=working_set_bytes)
    budget.set_static(model)
    budget.reset_peak()
    train_step(model, budget)
    return budget.peak_bytes()


def test_oom_exactly_when_the_budget_is_crossed():
    model, working_set_bytes = small_model(), 100_000
    peak_bytes = measured_peak_bytes(model, working_set_bytes)
    static_bytes = training_static_bytes(model).total_bytes
    assert peak_bytes > static_bytes + working_set_bytes

    at_peak = AccountedBudget(peak_bytes, working_set_bytes=working_set_bytes)
    at_peak.set_static(model)
    train_step(model, at_peak)  # fits exactly
    assert at_peak.peak_bytes() == peak_bytes

    below = AccountedBudget(peak_bytes - 1, working_set_bytes=working_set_bytes)
    below.set_static(model)
    with pytest.raises(torch.OutOfMemoryError, match="Tried to allocate") as caught:
        train_step(model, below)
    error = caught.value
    assert isinstance(error, AccountedOutOfMemoryError)
    assert error.in_use_bytes + error.requested_bytes == peak_bytes
    assert error.limit_bytes == peak_bytes - 1
    del caught, error  # the traceback holds the failed forward's graph
    gc.collect()
    # Once the failed graph is gone its saved bytes are back; the budget works again.
    assert below.saved_bytes() == 0
    below.limit_bytes = peak_bytes
    below.reset_peak()
    train_step(model, below)
    assert below.peak_bytes() == peak_bytes


def test_reset_forgets_a_graph_still_alive():
    model, budget = small_model(), AccountedBudget(None)
    idx, targets = batch()
    with budget.track():
        loss = total_loss(model, idx, targets)
    budget.reset()
    assert budget.saved_bytes() == 0 and budget.stats().packed_bytes == 0
    del loss  # its handles belong to the forgotten generation: no negative count
    assert budget.saved_bytes() == 0


def test_static_bytes_over_the_limit_raise_at_once():
    model = small_model()
    budget = AccountedBudget(training_static_bytes(model).total_bytes - 1)
    with pytest.raises(AccountedOutOfMemoryError, match="parameters, gradients"):
        budget.set_static(model)


# -- offload ----------------------------------------------------------------------------------


def test_offload_moves_saved_bytes_to_host_with_identical_gradients():
    keep = AccountedBudget(None)
    model = small_model()
    keep_grads = train_step(model, keep)

    budget = AccountedBudget(None)
    model.zero_grad(set_to_none=True)
    idx, targets = batch()
    with budget.track():
        with budget.offload():
            loss = total_loss(model, idx, targets)
        assert budget.saved_bytes() == 0  # nothing left on the device budget
        assert budget.stats().offloaded_bytes > 0.5 * keep.stats().saved_peak_bytes
        loss.backward()
    del loss
    stats = budget.stats()
    assert stats.saved_peak_bytes == 0
    # All alive until backward, but for the MTP block's aux-loss branch, dropped in forward.
    assert 0.99 * stats.offloaded_bytes < stats.host_peak_bytes <= stats.offloaded_bytes
    assert budget._offloader.stats().host_current_bytes == 0
    assert stats.copy_s > 0
    for p, k in zip(model.parameters(), keep_grads, strict=True):
        torch.testing.assert_close(p.grad, k, rtol=0, atol=1e-6)


# -- the working set --------------------------------------------------------------------------


def test_calibrated_working_set_bounds_the_real_peak():
    model = small_model()
    idx, targets = batch()
    before = [p.grad for p in model.parameters()]
    cal = calibrate_working_set(model, lambda: total_loss(model, idx, targets))
    assert cal.measured
    assert all(p.grad is g for p, g in zip(model.parameters(), before, strict=True))
    # The profiler's allocations matched the saved storages (all but the batch's ids).
    assert cal.saved_peak_bytes - 2 * idx.nbytes <= cal.saved_allocated_bytes
    assert cal.saved_allocated_bytes <= cal.saved_peak_bytes
    assert cal.grads_bytes == training_static_bytes(model).grads_bytes
    # Logits [N, V] fp32 are never saved (log-softmax saves its output) but live a while.
    logits_bytes = BATCH * SEQ_LEN * SMALL.vocab_size * 4
    assert cal.working_set_bytes >= logits_bytes
    # The accounted model bounds what the step really held at once.
    bound = cal.saved_peak_bytes + cal.grads_bytes + cal.working_set_bytes
    assert cal.peak_allocated_bytes <= bound


# -- the real allocator ------------------------------------------------------------------------


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_cuda_budget_raises_the_real_oom():
    device = torch.device("cuda")
    budget = CudaBudget(256 * 2**20, device)
    try:
        torch.cuda.empty_cache()
        budget.reset_peak()
        fits = torch.empty(64 * 2**20, dtype=torch.uint8, device=device)
        assert budget.in_use_bytes() >= fits.nbytes
        with pytest.raises(torch.cuda.OutOfMemoryError):
            torch.empty(512 * 2**20, dtype=torch.uint8, device=device)
        del fits
        model = small_model().to(device)
        idx, targets = (t.to(device) for t in batch())
        with budget.track():
            loss = total_loss(model, idx, targets)
            assert budget.saved_bytes() > 0
            with budget.offload():
                offloaded = total_loss(model, idx, targets)
            (loss + offloaded).backward()
        del loss, offloaded
        assert budget.saved_bytes() == 0
        assert budget.stats().offloaded_bytes > 0 and budget.stats().copy_s > 0
    finally:
        budget.close()
