"""MTP A/B figures from a run's request records and its scenarios (``[mtp_ab]``): each
arm's figures per level and mode, its effects against MTP off, and the crossover. The
definitions are in ``collectors.mtp_ab_records``."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from moeperf.collectors.bootstrap import bootstrap_ratio_ci
from moeperf.collectors.latency import itl_samples_s, per_request
from moeperf.collectors.mtp_ab_records import (
    TESTED_METRICS,
    MtpAbArmLevel,
    MtpAbBlock,
    MtpAbCrossover,
    MtpAbEffect,
    MtpAbSummary,
)
from moeperf.collectors.serving_records import ScenarioSummary

_CONFIDENCE = 0.95
_N_BOOT = 2000


def with_figures(
    summary: MtpAbSummary, requests: pd.DataFrame, scenarios: Mapping[str, ScenarioSummary]
) -> MtpAbSummary:
    """``summary`` with its arm figures, effects and crossover filled in from ``requests``
    (the run's records frame) and the scenarios of its blocks."""
    measured = requests[(requests["phase"] == "measure") & (requests["status"] == "ok")]
    samples = _samples(measured)
    arm_levels, pooled = [], {}
    for key, blocks in _groups(summary.blocks).items():
        names = tuple(b.scenario for b in blocks)
        pooled[key] = {
            metric: values[values["scenario"].isin(names)][column].dropna().to_numpy(float)
            for metric, (values, column) in samples.items()
        }
        arm_levels.append(_arm_level(key, names, pooled[key], scenarios))
    by_key = {(a.drafts, a.mode, a.streams): a for a in arm_levels}
    effects = [
        effect
        for (drafts, mode, streams), arm in by_key.items()
        if drafts != 0 and (0, mode, streams) in by_key
        for effect in _effects(arm, by_key[0, mode, streams], pooled)
    ]
    return dataclasses.replace(
        summary,
        arm_levels=tuple(arm_levels),
        effects=tuple(effects),
        crossover=tuple(crossover(effects, mode) for mode in summary.modes),
    )


Key = tuple[int, str, int]  # (drafts, mode, streams)


def _groups(blocks: Sequence[MtpAbBlock]) -> dict[Key, list[MtpAbBlock]]:
    groups: dict[Key, list[MtpAbBlock]] = {}
    for block in blocks:
        groups.setdefault((block.drafts, block.mode, block.streams), []).append(block)
    return groups


def _samples(measured: pd.DataFrame) -> dict[str, tuple[pd.DataFrame, str]]:
    """Per metric: the frame of its samples (with a scenario column) and its column."""
    latencies = per_request(measured)
    # Content chunks: those carrying tokens (not a role-only or usage-only event).
    carrying = measured["chunk_tokens"].map(lambda c: sum(1 for t in c if t > 0)).to_numpy()
    latencies["tokens_per_chunk"] = np.where(
        carrying > 0, latencies["output_tokens"].to_numpy(float) / np.maximum(carrying, 1), np.nan
    )
    return {
        "ttft_s p50": (latencies, "ttft_s"),
        "tpot_s p50": (latencies, "tpot_s"),
        "itl_s p50": (itl_samples_s(measured), "itl_s"),
        "tokens_per_chunk": (latencies, "tokens_per_chunk"),
    }


def _median(values: np.ndarray) -> float | None:
    return float(np.median(values)) if len(values) else None


def _arm_level(
    key: Key,
    names: tuple[str, ...],
    values: dict[str, np.ndarray],  # the blocks' pooled samples, by metric
    scenarios: Mapping[str, ScenarioSummary],
) -> MtpAbArmLevel:
    entries = [scenarios[n] for n in names if n in scenarios]
    window_s = sum(e.window_s for e in entries)
    tokens = sum(e.output_tokens for e in entries)
    chunk_values = values["tokens_per_chunk"]
    counters = [e.target_counters for e in entries if e.target_counters is not None]

    def total(field: str) -> float | None:
        got = [getattr(c, field) for c in counters]
        return float(sum(got)) if got and all(v is not None for v in got) else None

    drafts, draft_tokens, accepted = (
        total("spec_drafts"),
        total("spec_draft_tokens"),
        total("spec_accepted_tokens"),
    )
    by_position = None
    # Per block, drafts x ratio = drafts whose i-th token was accepted: summed, over drafts.
    if drafts and all(c.spec_acceptance_by_position for c in counters):
        width = min(len(c.spec_acceptance_by_position or ()) for c in counters)
        by_position = tuple(
            sum((c.spec_drafts or 0) * (c.spec_acceptance_by_position or ())[i] for c in counters)
            / drafts
            for i in range(width)
        )
    per_step = 1 + accepted / drafts if drafts and accepted is not None else None
    if per_step is None:  # SGLang: the mean of its accept-length gauge over the blocks
        gauges = [c.spec_tokens_per_step for c in counters if c.spec_tokens_per_step]
        per_step = float(np.mean(gauges)) if gauges else None
    return MtpAbArmLevel(
        drafts=key[0],
        mode=key[1],
        streams=key[2],
        scenarios=names,
        requests=sum(e.ok for e in entries),
        ttft_p50_s=_median(values["ttft_s p50"]),
        tpot_p50_s=_median(values["tpot_s p50"]),
        itl_p50_s=_median(values["itl_s p50"]),
        output_tokens_per_s=tokens / window_s if window_s > 0 else None,
        tokens_per_chunk=float(chunk_values.mean()) if len(chunk_values) else None,
        draft_tokens=draft_tokens,
        acceptance_ratio=accepted / draft_tokens if draft_tokens and accepted is not None else None,
        acceptance_by_position=by_position,
        tokens_per_step=per_step,
    )


def _effects(
    arm: MtpAbArmLevel, off: MtpAbArmLevel, pooled: dict[Key, dict[str, np.ndarray]]
) -> list[MtpAbEffect]:
    key, off_key = (arm.drafts, arm.mode, arm.streams), (0, arm.mode, arm.streams)
    out = []
    for metric in TESTED_METRICS:
        a, b = pooled[off_key][metric], pooled[key][metric]
        ratio = float(np.median(b) / np.median(a)) if len(a) and len(b) and np.median(a) else None
        ci = bootstrap_ratio_ci(a, b, "median", _N_BOOT, _CONFIDENCE, np.random.default_rng(0))
        verdict = "not tested" if ci is None else _verdict(ci)
        low, high = ci if ci is not None else (None, None)
        out.append(
            MtpAbEffect(arm.drafts, arm.mode, arm.streams, metric, ratio, low, high, verdict)
        )
    rate = (
        arm.output_tokens_per_s / off.output_tokens_per_s
        if arm.output_tokens_per_s and off.output_tokens_per_s
        else None
    )
    out.append(
        MtpAbEffect(
            arm.drafts, arm.mode, arm.streams, "output tokens/s", rate, None, None, "not tested"
        )
    )
    return out


def _verdict(ci: tuple[float, float]) -> str:
    """A latency ratio's verdict: lower is better."""
    low, high = ci
    if high < 1:
        return "better"
    if low > 1:
        return "worse"
    return "no difference"


def crossover(effects: Sequence[MtpAbEffect], mode: str) -> MtpAbCrossover:
    """Where MTP stops paying in ``mode`` (see collectors.mtp_ab_records)."""
    tpot = [e for e in effects if e.mode == mode and e.metric == "tpot_s p50"]
    pays = sorted({e.streams for e in tpot if e.verdict == "better"})
    run = sorted({e.streams for e in tpot})
    stops = next(
        (level for level in run if level not in pays and any(p < level for p in pays)), None
    )
    if not run:
        text = "not measured"
    elif not pays:
        text = f"MTP pays at no level run ({', '.join(f'c={x}' for x in run)})"
    elif stops is None:
        text = f"MTP pays at every level from c={pays[0]}" + (
            "" if pays == run else f" (not at {', '.join(f'c={x}' for x in run if x < pays[0])})"
        )
    else:
        text = f"MTP stops paying at c={stops} (it paid at c={max(p for p in pays if p < stops)})"
    return MtpAbCrossover(mode, tuple(pays), stops, text)
