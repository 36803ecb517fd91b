"""The seam between a model and an activation-memory policy: the operators a policy may keep,
recompute or offload (``Op``), and what runs them (``OpRunner``; ``DIRECT`` runs them as is).

Apart from the layers because both reference models and the trainer's policies
(targets.training) name these, and a policy needs no model to implement them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from torch import Tensor

# An operator whose saved activations a training policy may keep, recompute or offload:
# ("layer", l, -1) a whole transformer layer, ("attention", l, -1) its attention half,
# ("expert", l, e) one expert's SwiGLU over the tokens routed to it.
Op = tuple[str, int, int]


class OpRunner(Protocol):
    """Runs the model's operators; activation-memory policies (the trainer's) implement it.

    ``after_routing`` is called once a layer's router has chosen, before its experts run:
    the point where a policy knows this micro-batch's expert loads. A recomputed operator's
    forward runs again in backward, calls included.
    """

    def after_routing(self, layer: int, tokens_per_expert: Tensor) -> None: ...

    def run(self, op: Op, fn: Callable[..., Any], *args: Any) -> Any: ...


class DirectRunner:
    """Run every operator as is: autograd keeps what it saves (inference, plain training)."""

    def after_routing(self, layer: int, tokens_per_expert: Tensor) -> None:
        pass

    def run(self, op: Op, fn: Callable[..., Any], *args: Any) -> Any:
        return fn(*args)


DIRECT = DirectRunner()
