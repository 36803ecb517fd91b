"""What the synthetic model will do for one request, decided before the first byte.

All randomness of a request (its fault, its jittered delays) is drawn here from a
``random.Random`` seeded with the config's seed and the request's index, in a fixed order,
so the same config replays the same plan for the n-th request of every run. Drawing
everything up front also keeps the per-chunk path down to a sleep and a write.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass

from moeperf.targets.synthetic.config import SyntheticConfig

NS_PER_S = 1_000_000_000
FAULTS = ("error", "stall", "malformed", "truncate")


@dataclass(frozen=True, slots=True)
class RequestPlan:
    """Chunking, deadlines and fault of one request.

    ``due_ns[i]`` is when token chunk ``i`` is due, in ns after the request started (left
    the stream queue, which without a wait is when it was received); it already contains
    the stall when ``fault == "stall"``. ``fault_chunk`` is the token chunk the fault
    happens just before (the stall, the malformed event, the truncation), the first chunk
    after half of the tokens; None without a mid-stream fault.
    """

    fault: str | None
    fault_chunk: int | None
    chunk_tokens: tuple[int, ...]
    due_ns: tuple[int, ...]


def plan_request(config: SyntheticConfig, index: int, output_tokens: int) -> RequestPlan:
    """The plan for the ``index``-th request of a server, producing ``output_tokens``."""
    # A str seed is hashed with SHA-512 by random.Random: stable across processes.
    rng = random.Random(f"{config.seed}/{index}")
    fault = _draw_fault(config, rng.random())

    per_chunk = config.tokens_per_chunk
    full, rest = divmod(output_tokens, per_chunk)
    chunk_tokens = (per_chunk,) * full + ((rest,) if rest else ())

    # The soak's planted slowdown (a test switch; 1.0 when off): grows with requests served.
    slower = 1.0 + config.slowdown_per_request_ratio * (index - 1)
    due_ns: list[int] = []
    elapsed_ns = _delay_ns(config, rng, config.ttft_s * slower)
    due_ns.append(elapsed_ns)
    for tokens in chunk_tokens[1:]:
        elapsed_ns += _delay_ns(config, rng, tokens * config.itl_s * slower)
        due_ns.append(elapsed_ns)

    fault_chunk = None
    if fault in ("stall", "malformed", "truncate"):
        half = output_tokens // 2
        fault_chunk = min(-(-half // per_chunk), len(chunk_tokens) - 1)
        if fault == "stall":
            stall_ns = round(config.stall_s * NS_PER_S)
            due_ns[fault_chunk:] = [due + stall_ns for due in due_ns[fault_chunk:]]
    return RequestPlan(fault, fault_chunk, chunk_tokens, tuple(due_ns))


def malformed(plan: RequestPlan) -> RequestPlan:
    """``plan`` with the malformed fault (a drill window's, drill.py), at the chunk the
    drawn fault would take: the first after half of the tokens."""
    tokens = sum(plan.chunk_tokens)
    per_chunk = plan.chunk_tokens[0]
    chunk = min(-(-(tokens // 2) // per_chunk), len(plan.chunk_tokens) - 1)
    return dataclasses.replace(plan, fault="malformed", fault_chunk=chunk)


def _draw_fault(config: SyntheticConfig, u: float) -> str | None:
    # One uniform draw over consecutive intervals: each rate is exactly its fraction.
    edge = 0.0
    for fault in FAULTS:
        edge += getattr(config, f"{fault}_rate")
        if u < edge:
            return fault
    return None


def _delay_ns(config: SyntheticConfig, rng: random.Random, nominal_s: float) -> int:
    scale = config.jitter_scale
    kind = config.jitter
    if kind == "none":
        delay_s = nominal_s
    elif kind == "uniform":
        delay_s = nominal_s * (1.0 + rng.uniform(-scale, scale))
    elif kind == "normal":
        delay_s = nominal_s * (1.0 + rng.gauss(0.0, scale))
    elif kind == "lognormal":
        delay_s = nominal_s * rng.lognormvariate(0.0, scale)
    else:  # exponential: an extra delay, mean scale * nominal (expovariate takes a rate)
        delay_s = nominal_s * (1.0 + (rng.expovariate(1.0 / scale) if scale > 0 else 0.0))
    return max(0, round(delay_s * NS_PER_S))
