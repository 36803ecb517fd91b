"""Prefill throughput of a sweep over prompt lengths ([sweep]), per scenario.

Every request of a sweep scenario has the same prompt length L, built exact in the
target's tokenizer (``input_tokens`` of the scenario; the server's count is the same for
completions, and a chat template's few tokens more for chat). Two rates:

- per-request prefill rate, prompt tokens/s = L / TTFT p50 (TTFT and its p50 as
  ``collectors.latency`` and ``collectors.quantiles`` define them); its 95% interval is the
  TTFT p50's inverted: L / upper bound .. L / lower bound. TTFT runs from the intended
  send, so at one stream it is the target's prefill of one prompt plus the first
  token's decode and the network; with more streams it includes queueing for the
  engine, which is what a user waits.
- total prompt tokens/s = L x ok measured requests / the measured window (the window of
  ``collectors.summary``): how many prompt tokens the target took in per second at that
  load. With one output token per request, at a saturating level this is the target's
  prefill throughput. One number per level: no interval.
"""

from __future__ import annotations

from dataclasses import dataclass

from moeperf.collectors.serving_records import ScenarioSummary


@dataclass(frozen=True, slots=True)
class PrefillRates:
    """Prompt tokens/s of one sweep scenario (None: not measured, e.g. no ok request)."""

    per_request_p50_tok_s: float | None
    per_request_ci_low_tok_s: float | None
    per_request_ci_high_tok_s: float | None
    total_tok_s: float | None


def prefill_rates(entry: ScenarioSummary) -> PrefillRates | None:
    """The rates of a scenario of a sweep; None for a scenario of no sweep."""
    length = entry.input_tokens
    if length is None:
        return None
    p50 = entry.latency_s.ttft_s.at(0.5)

    def rate(ttft_s: float | None) -> float | None:
        return length / ttft_s if ttft_s is not None and ttft_s > 0 else None

    total = None
    if entry.ok and entry.window_s > 0:
        total = length * entry.ok / entry.window_s
    if p50 is None:
        return PrefillRates(None, None, None, total)
    return PrefillRates(rate(p50.value), rate(p50.ci_high), rate(p50.ci_low), total)
