"""Texts of the target's own figures that the terminal and the report both print: its KV
cache as it states it, and the bucket a server latency is estimated in
(``collectors.target_counters``, ``collectors.server_latency``)."""

from __future__ import annotations

from collections.abc import Mapping

from moeperf.collectors.server_latency import BucketEstimate
from moeperf.collectors.server_latency_compare import Comparison
from moeperf.collectors.serving_records import ScenarioSummary
from moeperf.collectors.target_counters import TargetCounters

DASH = "-"
EXACT = "exact (sum / count)"


def repeats_suffix(entry: ScenarioSummary) -> str:
    """How many of a level's prompts it sent twice, where it did (a control level's hit rate
    is then no clean control), to follow its hit rate; "" where none."""
    if not entry.repeated_prompts_total:
        return ""
    sent = sum(worker.sent for worker in entry.harness)
    return f" ({entry.repeated_prompts_total} of {sent} prompts repeated)"


def bound_ms(bound_s: float) -> str:
    """A bucket bound in ms, with as few digits as it has ("20", "250", "2,560,000")."""
    return f"{bound_s * 1e3:,.10g}"


def bucket_bounds(estimate: BucketEstimate) -> str:
    """ "20-40" (ms), or "above 2,560,000" for the +Inf bucket."""
    if estimate.upper_s is None:
        return f"above {bound_ms(estimate.lower_s)}"
    return f"{bound_ms(estimate.lower_s)}-{bound_ms(estimate.upper_s)}"


def bucket_text(row: Comparison) -> str:
    """Where the server's figure comes from: its bucket's bounds in ms, or exact."""
    if row.exact:
        return EXACT
    return DASH if row.server_bucket is None else bucket_bounds(row.server_bucket)


def kv_cache_text(c: TargetCounters) -> str | None:
    """ "KV cache (vllm): 8,192 blocks of 128 tokens (1,048,576 tokens), 1.00 GiB"; None
    where the target states neither its blocks nor its bytes."""
    parts: list[str] = []
    if c.kv_blocks_total is not None:
        blocks = f"{c.kv_blocks_total:,.0f} blocks"
        if c.kv_block_size_tokens is not None:
            tokens = c.kv_blocks_total * c.kv_block_size_tokens
            blocks += f" of {c.kv_block_size_tokens:,.0f} tokens ({tokens:,.0f} tokens)"
        parts.append(blocks)
    if c.kv_cache_bytes_total is not None:
        parts.append(f"{c.kv_cache_bytes_total / 2**30:,.2f} GiB")
    if not parts:
        return None
    return f"KV cache ({c.dialect}): " + ", ".join(parts)


def kv_cache_line(scenarios: Mapping[str, ScenarioSummary]) -> str | None:
    """The target's KV cache, once for the run (the same at every level of a target that
    was not restarted); each different one, in level order, where it changed."""
    said = dict.fromkeys(
        text
        for e in scenarios.values()
        if e.target_counters is not None and (text := kv_cache_text(e.target_counters))
    )
    return "; ".join(said) if said else None
