"""The plan in the terminal (a rich table) and as JSON (for ``--json PATH``)."""

from __future__ import annotations

import dataclasses
from typing import Any

from rich.table import Table

from moeperf.suites.plan.deploy import GIB
from moeperf.suites.plan.plan import Plan


def _gib(n: int) -> str:
    return f"{n / GIB:,.3f}"


def plan_table(plan: Plan) -> Table:
    d = plan.deploy
    table = Table(
        title=(
            f"{plan.model.model_type}: {plan.weights.total_params:,} parameters; per device "
            f"({d.devices} devices, tp {d.tp} ep {d.ep} pp {d.pp} dp {d.dp}, weights "
            f"{d.weight_dtype}, kv {d.kv_dtype})"
        )
    )
    table.add_column("component")
    table.add_column("bytes", justify="right")
    table.add_column("GiB", justify="right")
    for name, size in plan.fixed_bytes.items():
        table.add_row(name, f"{size:,}", _gib(size))
    table.add_row("free for cache", f"{plan.free_for_cache:,}", _gib(plan.free_for_cache))
    table.add_row("device memory", f"{d.memory_bytes:,}", _gib(d.memory_bytes))
    return table


def plan_lines(plan: Plan) -> list[str]:
    c, d = plan.cache, plan.deploy
    lines = [
        f"KV bytes per token per device: {c.bytes_per_token:,} ({c.attention_layers_per_device} "
        f"attention layers x {c.kv_bytes_per_token_per_layer:,}"
        + (f" + hidden state {c.hidden_bytes_per_token:,}" if c.hidden_bytes_per_token else "")
        + ")"
        + (" (kv heads replicated: fewer than tp)" if c.kv_heads_replicated else ""),
    ]
    if c.linear_layers_per_device:
        lines.append(
            f"linear-attention state per sequence: {c.state_bytes_per_sequence:,} bytes "
            f"({c.linear_layers_per_device} layers)"
        )
    lines += [
        f"KV tokens that fit: {plan.kv_tokens:,}",
        f"sequences at max context ({d.max_context_tokens:,} tokens) that fit per device: "
        f"{plan.sequences_at_max_context:,} (running per replica: {d.running_per_replica:,} "
        f"= ceil({d.max_running_requests:,} / dp {d.dp}))",
    ]
    if plan.fits:
        lines.append("verdict: fits")
    else:
        lines.append(f"verdict: over budget: {plan.overflow}")
        if plan.changes:
            lines += [
                f"  fits with: {ch.description} (holds {ch.sequences_at_max_context:,} sequences)"
                for ch in plan.changes
            ]
        else:
            lines.append("  no single change tried fits (docs/guides/memory-planning.md)")
    return lines


def plan_json(plan: Plan) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "model": dataclasses.asdict(plan.model),
        "deploy": plan.deploy.model_dump(),
        "params_total": plan.weights.params_total,
        "bytes_per_device": plan.fixed_bytes,
        "cache": dataclasses.asdict(plan.cache) | {"bytes_per_token": plan.cache.bytes_per_token},
        "free_for_cache": plan.free_for_cache,
        "kv_tokens": plan.kv_tokens,
        "sequences_at_max_context": plan.sequences_at_max_context,
        "fits": plan.fits,
        "overflow": plan.overflow,
        "changes": [dataclasses.asdict(ch) for ch in plan.changes],
    }
