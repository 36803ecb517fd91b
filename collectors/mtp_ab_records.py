"""MTP A/B (``[mtp_ab]``), as a serving run's summary holds it: the blocks run, each arm's
figures per level and mode, its effects against MTP off, where MTP stops paying, and
whether speculation left greedy outputs unchanged.

Definitions (docs/tutorials/mtp-ab.md; ``collectors.mtp_ab_summary`` computes them):
- an arm's figures at a level and mode pool the measured ok requests of all its blocks:
  TTFT, TPOT and ITL p50 as in ``collectors.latency``; output tokens/s is their output
  tokens over the sum of the blocks' measured windows;
- acceptance from the target's own counters, as increases over each block's window
  (scraped at its start and end: never lifetime values) summed over the arm's blocks:
  accepted draft tokens / draft tokens; by position, drafts whose i-th token was accepted
  / drafts; tokens per step, 1 + accepted / drafts (SGLang: its accept-length gauge);
- tokens per chunk: a request's output tokens over its content chunks, the mean over
  requests (above 1: the server streams each step's accepted tokens together);
- an effect is the arm's statistic over MTP off's, with a 95% percentile-bootstrap
  interval (requests resampled, each side on its own, ``collectors.bootstrap``); its
  verdict: "better" or "worse" when the interval excludes 1, else "no difference".
  Output tokens/s is a rate of totals: its ratio is reported, never resampled
  ("not tested").
- MTP pays at a level when some arm's TPOT p50 is "better" there; the crossover is the
  first level, from the lowest, at which no arm's is, after one at which one was.
"""

from __future__ import annotations

from dataclasses import dataclass

# Latencies, resampled and tested (lower is better); then the rate, reported only.
TESTED_METRICS = ("tpot_s p50", "itl_s p50", "ttft_s p50")
EFFECT_METRICS = (*TESTED_METRICS, "output tokens/s")


@dataclass(frozen=True, slots=True)
class MtpAbBlock:
    """One block: one arm at one level and mode, for one ``load.duration_s``."""

    scenario: str
    drafts: int  # 0: MTP off
    mode: str  # "greedy" or "sampled"
    streams: int
    round: int  # 1-based; odd rounds run the arms in order, even ones reversed


@dataclass(frozen=True, slots=True)
class MtpAbArmLevel:
    drafts: int
    mode: str
    streams: int
    scenarios: tuple[str, ...]
    requests: int  # measured ok requests, all blocks
    ttft_p50_s: float | None
    tpot_p50_s: float | None
    itl_p50_s: float | None
    output_tokens_per_s: float | None
    tokens_per_chunk: float | None
    # From the target's counters (None: it does not export them, or MTP off).
    draft_tokens: float | None
    acceptance_ratio: float | None
    acceptance_by_position: tuple[float, ...] | None
    tokens_per_step: float | None


@dataclass(frozen=True, slots=True)
class MtpAbEffect:
    drafts: int
    mode: str
    streams: int
    metric: str  # one of EFFECT_METRICS
    ratio: float | None  # arm / MTP off
    ci_low: float | None
    ci_high: float | None
    verdict: str  # "better", "worse", "no difference", "not tested"


@dataclass(frozen=True, slots=True)
class MtpAbCrossover:
    mode: str
    pays_at: tuple[int, ...]  # levels (streams) at which some arm's TPOT p50 is better
    stops_at: int | None  # the crossover, if the levels contain it
    text: str


@dataclass(frozen=True, slots=True)
class MtpAbMismatch:
    """A prompt whose greedy output with MTP differs from MTP off's."""

    prompt: int  # index in the shipped order of the equality prompts
    drafts: int
    position: int  # the first differing output token, or character (0-based)
    off_token: str | None  # None: that output ended before the position
    arm_token: str | None


@dataclass(frozen=True, slots=True)
class MtpAbEquality:
    """Greedy output equality: each arm's output tokens against MTP off's, per prompt."""

    prompts: int
    streams: int  # sent this many at once (batching is part of what is checked)
    output_tokens: int
    arms: tuple[int, ...]  # draft counts compared with 0
    mismatches: tuple[MtpAbMismatch, ...]
    not_available: str | None = None  # why no comparison was made
    # "token": outputs compared token by token (the target's logprobs name each token);
    # "character": a target without logprobs, outputs compared as text.
    position_unit: str = "token"

    @property
    def passed(self) -> bool | None:
        return None if self.not_available else not self.mismatches


@dataclass(frozen=True, slots=True)
class MtpAbSummary:
    drafts: tuple[int, ...]
    modes: tuple[str, ...]
    levels: tuple[int, ...]
    blocks_per_arm: int
    block_s: float
    sampled_temperature: float
    blocks: tuple[MtpAbBlock, ...]
    arm_levels: tuple[MtpAbArmLevel, ...] = ()
    effects: tuple[MtpAbEffect, ...] = ()
    crossover: tuple[MtpAbCrossover, ...] = ()
    equality: MtpAbEquality | None = None


def arm_name(drafts: int) -> str:
    return "MTP off" if drafts == 0 else f"k={drafts}"


def block_scenario(drafts: int, mode: str, streams: int, round_: int) -> str:
    return f"{arm_name(drafts)} {mode} c={streams} #{round_}"


# The effects' metric names as a table's column heads.
EFFECT_HEADS = {"tpot_s p50": "TPOT p50", "itl_s p50": "ITL p50", "ttft_s p50": "TTFT p50",
                "output tokens/s": "output tok/s"}  # fmt: skip


def effect_text(effect: MtpAbEffect | None) -> str:
    """ "0.91 [0.87, 0.98] better": the ratio, its 95% interval and verdict; the ratio alone
    where it was not tested (a rate of totals), "-" where there is none."""
    if effect is None or effect.ratio is None:
        return "-"
    if effect.ci_low is None or effect.ci_high is None:
        return f"{effect.ratio:.2f}"
    return f"{effect.ratio:.2f} [{effect.ci_low:.2f}, {effect.ci_high:.2f}] {effect.verdict}"


def verdict_rows(ab: MtpAbSummary) -> list[tuple[str, int, int, tuple[str, ...]]]:
    """The A/B's answer, one row per (mode, streams, arm) in the order run: each
    EFFECT_METRICS's ``effect_text``."""
    by_row: dict[tuple[str, int, int], dict[str, MtpAbEffect]] = {}
    for effect in ab.effects:
        by_row.setdefault((effect.mode, effect.streams, effect.drafts), {})[effect.metric] = effect
    return [
        (mode, streams, drafts, tuple(effect_text(effects.get(m)) for m in EFFECT_METRICS))
        for (mode, streams, drafts), effects in by_row.items()
    ]
