"""The prompt lengths of a ``[sweep]``: which are sent, and which the target cannot hold.

A length is sent when its prompt and the most output tokens a request asks for fit the
target's context limit (with chat, also ``CHAT_TEMPLATE_ALLOWANCE``: the template wraps
the prompt in tokens of its own, which the harness does not count). Where the limit is
unknown (the target states none and the spec gives none) every listed length is sent,
and a target refusing one says so in its errors; ``max = "context"`` then has nothing
to reach, which is the user's to fix (exit 2, before anything is sent).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from moeperf.collectors.scenario import ScenarioMode
from moeperf.collectors.sweep_records import SweepPlan
from moeperf.suites.errors import UsageError
from moeperf.suites.serving.mode_spec import InputTokensSweep

# Tokens kept free for a chat template around the prompt (the reference target's adds 6,
# Llama 3's about 30 with its system header; a template longer than this may overflow
# the limit at max = "context", and the target's error then names it).
CHAT_TEMPLATE_ALLOWANCE = 64


@dataclass(frozen=True, slots=True)
class ContextLimit:
    """A target's context limit in tokens (prompt + output) and where it was read."""

    tokens: int | None
    source: str  # "spec (sweep.input_tokens.context_tokens)", "target (/v1/models ...)"


@dataclass(frozen=True, slots=True)
class SweepPoint:
    """One prompt length of the sweep: sent, or why it is not available."""

    input_tokens: int
    not_available: str | None = None  # None: sent

    @property
    def sent(self) -> bool:
        return self.not_available is None


def log_spaced(low: int, high: int, points: int) -> tuple[int, ...]:
    """``points`` whole numbers from ``low`` to ``high``, log-spaced, both ends included
    (fewer when rounding makes two equal)."""
    if points == 1 or high <= low:
        return (high,)
    values = np.rint(np.geomspace(low, high, points)).astype(int)
    return tuple(dict.fromkeys(int(v) for v in values))


def sweep_points(
    sweep: InputTokensSweep, limit: ContextLimit, max_output_tokens: int, api: str
) -> tuple[SweepPoint, ...]:
    """The sweep's prompt lengths, ascending, each sent or marked not available."""
    allowance = CHAT_TEMPLATE_ALLOWANCE if api == "chat" else 0
    if sweep.values:
        lengths = tuple(sorted(sweep.values))
    else:
        high = sweep.max
        if high == "context":
            if limit.tokens is None:
                raise UsageError(
                    "sweep.input_tokens.max = 'context', but the target states no context "
                    "limit (no max_model_len at /v1/models): set "
                    "sweep.input_tokens.context_tokens to its limit, or give "
                    "sweep.input_tokens.max (or values); nothing was sent"
                )
            high = limit.tokens - max_output_tokens - allowance
            if high < sweep.min:
                raise UsageError(
                    f"the target's context limit of {limit.tokens} tokens ({limit.source}) "
                    f"leaves {high} prompt tokens beside {max_output_tokens} output tokens"
                    f"{' and the chat template' if allowance else ''}, less than "
                    f"sweep.input_tokens.min ({sweep.min}); nothing was sent"
                )
        lengths = log_spaced(sweep.min, high, sweep.points)
    return tuple(_point(n, limit, max_output_tokens, allowance) for n in lengths)


def _point(length: int, limit: ContextLimit, output: int, allowance: int) -> SweepPoint:
    if limit.tokens is None or length + output + allowance <= limit.tokens:
        return SweepPoint(length)
    template = f" + {allowance} for the chat template" if allowance else ""
    return SweepPoint(
        length,
        f"not available from this target: {length} prompt + {output} output tokens"
        f"{template} exceed its context limit of {limit.tokens} tokens ({limit.source})",
    )


def context_limit(sweep: InputTokensSweep, stated: int | None, checked: str) -> ContextLimit:
    """The limit the spec gives, else the one the target states at ``checked``."""
    if sweep.context_tokens is not None:
        return ContextLimit(sweep.context_tokens, "spec: sweep.input_tokens.context_tokens")
    if stated is not None:
        return ContextLimit(stated, f"target: max_model_len at {checked}")
    return ContextLimit(None, "not stated by the target")


@dataclass(frozen=True, slots=True)
class SweepRun:
    """A sweep's prompt lengths, fit to the target's context limit before anything is sent."""

    points: tuple[SweepPoint, ...]
    limit: ContextLimit
    max_output_tokens: int
    load_mode: ScenarioMode  # how each length's levels are offered (load.mode)
    plan: SweepPlan | None = None  # [plan]: the planner's prediction per length sent
