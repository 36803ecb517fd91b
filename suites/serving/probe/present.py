"""A probe result for people: a rich table of what was found, and the spec section that
fits the target (``[target]`` and the workload's tokenizer), ready to paste."""

from __future__ import annotations

import json

from rich.table import Table

from moeperf.suites.serving.probe.result import ProbeResult

_USAGE = {
    "every_chunk": "on every chunk",
    "finish_chunk": "on the finish_reason chunk",
    "separate_chunk": "in a chunk of its own (no choices) at the end",
    "absent": "not sent",
    "rejected": "stream_options refused",
}


def _yes(value: bool) -> str:
    return "yes" if value else "no"


def probe_rows(result: ProbeResult) -> list[tuple[str, str]]:
    """(what, found) for every question the probe asked."""
    m = result.metrics
    chunk_tokens = "not known exactly (no per-chunk usage or logprobs)"
    if result.tokens_per_chunk_max is not None:
        chunk_tokens = (
            f"max {result.tokens_per_chunk_max}, mean {result.tokens_per_chunk_mean:.2f} "
            f"(from {result.tokens_per_chunk_source})"
        )
        if result.multi_token_chunks:
            chunk_tokens += ": multi-token chunks, speculative decoding likely"
    rows = [
        ("models served", ", ".join(result.models) or "none listed"),
        ("model probed", result.model),
        ("streaming", "yes"),
        ("sends data: [DONE]", _yes(result.sends_done)),
        ("role-only first chunk", _yes(result.role_first_chunk)),
        ("usage without asking", _yes(result.usage_unasked)),
        ("usage with include_usage", _USAGE[result.usage_placement]),
        ("continuous_usage_stats", result.continuous_usage),
        ("per-token logprobs", result.logprobs_per_chunk),
        ("tokens per chunk", chunk_tokens),
    ]
    rows += [
        (f"accepts {f.field}", f.support + (f" ({f.detail})" if f.support != "accepted" else ""))
        for f in result.fields
        if f.field in ("ignore_eos", "min_tokens")
    ]
    rows += [
        ("/tokenize", _yes(result.tokenize)),
        ("/detokenize", _yes(result.detokenize)),
        ("/metrics", f"{m.dialect} dialect ({m.detail})" if m.available else f"no ({m.detail})"),
        ("spec-decode counters", _yes(m.spec_decode_counters)),
        ("prefix-cache counters", _yes(m.prefix_cache_counters)),
        ("prefix-cache reset endpoint", result.prefix_cache_reset or "none found"),
    ]
    return rows


def probe_table(result: ProbeResult) -> Table:
    table = Table(title=f"probe of {result.url} ({result.api})")
    table.add_column("what")
    table.add_column("found")
    for what, found in probe_rows(result):
        table.add_row(what, found)
    return table


def target_toml(result: ProbeResult, api_key_env: str = "") -> str:
    """The ``[target]`` section (and ``[workload] tokenizer``) that fits the target; with
    the name of the variable the probe took its key from (never the key itself)."""
    usage_ok = result.support("stream_options") == "accepted"
    continuous = result.continuous_usage == "honoured"
    ignore_eos = result.support("ignore_eos") == "accepted"
    lines = [
        "[target]",
        'kind = "url"',
        f"url = {json.dumps(result.url)}",
        f"api = {json.dumps(result.api)}",
        f"model = {json.dumps(result.model)}",
        f"include_usage = {str(usage_ok).lower()}  # usage: {_USAGE[result.usage_placement]}",
        f"continuous_usage = {str(continuous).lower()}  "
        f"# continuous_usage_stats: {result.continuous_usage}",
        f"ignore_eos = {str(ignore_eos).lower()}  # {result.support('ignore_eos')}",
    ]
    if api_key_env:
        lines.append(f"api_key_env = {json.dumps(api_key_env)}  # the key is read from it")
    if result.support("min_tokens") != "accepted":
        lines.append("# min_tokens: not accepted, leave it unset")
    lines += ["", "[workload]"]
    if result.tokenize:
        lines.append('tokenizer = "server"  # the target\'s /tokenize')
    else:
        # Random prompts of exact lengths need the target's tokenizer: without /tokenize,
        # the model's own tokenizer files on local disk.
        lines.append('tokenizer = "/path/to/model"  # no /tokenize: its local tokenizer.json dir')
    return "\n".join(lines)
