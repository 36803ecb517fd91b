"""Latency metrics derived from a run's raw request timestamps.

The definitions, exactly as implemented here (README and reports repeat them):

- TTFT: intended send time -> arrival of the first chunk carrying >= 1 generated token
  (a role-only or empty chunk does not count). ``ttft_from_send_s`` measures from the
  actual send time instead, and ``queue_delay_s`` = actual send - intended send is the
  client's own queueing delay, so coordinated omission is visible rather than hidden.
- TPOT (per request): (last token time - first token time) / (output tokens - 1);
  undefined for fewer than 2 output tokens.
- ITL (per token): for each token-carrying chunk after the first, the gap since the
  previous token-carrying chunk divided over the tokens of the later chunk, one sample per
  token, so a 3-token (MTP) chunk after 30 ms yields three 10 ms samples.
- ICL (inter-chunk latency): the undivided gaps between token-carrying chunks.
- E2E: intended send time -> last token.
- Output tokens: server usage when present, else the client's count (tokenizer), else the
  sum of per-chunk counts.
Only requests with status "ok" contribute latency samples.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

NS_PER_S = 1e9


def output_tokens(row: pd.Series) -> int | None:
    """Output tokens of one request: server usage, else client count, else chunk sum."""
    for column in ("output_tokens", "client_output_tokens"):
        value = row[column]
        if value is not None and not pd.isna(value):
            return int(value)
    chunks = row["chunk_tokens"]
    return int(np.sum(chunks)) if chunks is not None and len(chunks) else None


def _token_chunk_times(row: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    times = np.asarray(row["chunk_ns"], dtype=np.int64)
    tokens = np.asarray(row["chunk_tokens"], dtype=np.int64)
    carrying = tokens > 0
    return times[carrying], tokens[carrying]


def per_request(requests: pd.DataFrame) -> pd.DataFrame:
    """One row per request with its derived metrics in seconds (NaN where undefined)."""
    out = pd.DataFrame(
        {
            "request_id": requests["request_id"],
            "scenario": requests["scenario"],
            "phase": requests["phase"],
            "status": requests["status"],
            "error_type": requests["error_type"],
        }
    )
    ok = requests["status"] == "ok"
    first = requests["first_token_ns"].where(ok).astype("float64")
    last = requests["last_token_ns"].where(ok).astype("float64")
    intended = requests["intended_send_ns"].astype("float64")
    sent = requests["send_ns"].astype("float64")
    tokens = requests.apply(output_tokens, axis=1) if len(requests) else pd.Series(dtype=float)
    tokens = pd.to_numeric(tokens, errors="coerce").astype("float64")

    out["output_tokens"] = tokens
    out["ttft_s"] = (first - intended) / NS_PER_S
    out["ttft_from_send_s"] = (first - sent) / NS_PER_S
    out["queue_delay_s"] = (sent - intended) / NS_PER_S
    out["tpot_s"] = ((last - first) / NS_PER_S / (tokens - 1)).where(tokens >= 2)
    out["e2e_s"] = (last - intended) / NS_PER_S
    return out


def itl_samples_s(requests: pd.DataFrame) -> pd.DataFrame:
    """Per-token inter-token latencies (columns: scenario, request_id, itl_s)."""
    return _gap_samples(requests, per_token=True, column="itl_s")


def icl_samples_s(requests: pd.DataFrame) -> pd.DataFrame:
    """Inter-chunk latencies between token-carrying chunks (scenario, request_id, icl_s)."""
    return _gap_samples(requests, per_token=False, column="icl_s")


def _gap_samples(requests: pd.DataFrame, *, per_token: bool, column: str) -> pd.DataFrame:
    scenarios, ids, values = [], [], []
    for _, row in requests[requests["status"] == "ok"].iterrows():
        times, tokens = _token_chunk_times(row)
        if len(times) < 2:
            continue
        gaps_s = np.diff(times) / NS_PER_S
        if per_token:
            later = tokens[1:]
            samples = np.repeat(gaps_s / later, later)
        else:
            samples = gaps_s
        values.append(samples)
        scenarios.extend([row["scenario"]] * len(samples))
        ids.extend([row["request_id"]] * len(samples))
    flat = np.concatenate(values) if values else np.array([], dtype=float)
    return pd.DataFrame({"scenario": scenarios, "request_id": ids, column: flat})
