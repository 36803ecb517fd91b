"""Latency metrics derived from a run's raw request timestamps.

The definitions, exactly as implemented here (the docs' metric definitions page and every
report's appendix quote this text). All timestamps are the host's monotonic clock in
integer nanoseconds from the run's anchor, taken when a chunk's bytes arrive at the client.

- TTFT: intended send time -> arrival of the first chunk carrying >= 1 generated token
  (content, reasoning or tool-call text; a role-only or empty chunk does not count). The
  intended send time is, in closed loop, the moment the stream's previous request ended;
  in open loop, the precomputed arrival schedule. ``ttft_from_send_s`` measures from the
  actual send time instead, and ``queue_delay_s`` = actual send - intended send is the
  client's own queueing delay, so coordinated omission is visible rather than hidden.
- TPOT (per request): (last token time - first token time) / (output tokens - 1);
  undefined for fewer than 2 output tokens.
- ITL (per token): for each token-carrying chunk after the first, the gap since the
  previous token-carrying chunk divided over the tokens of the later chunk, one sample per
  token, so a 3-token (MTP) chunk after 30 ms yields three 10 ms samples, not one 30 ms one.
- ICL (inter-chunk latency): the undivided gaps between token-carrying chunks.
- E2E: intended send time -> last token.
- Output tokens: server usage when present, else the client's count (tokenizer), else the
  sum of per-chunk counts. Both the server's and the client's counts are stored; their
  difference is printed per level. The client counts by re-tokenizing the whole text it
  received with the target's tokenizer (``workload.tokenizer``; the reference target's own
  ``tokenizer.json``). A model's generated tokens need not be what its tokenizer makes of
  the same text, so a few fewer is expected and is not a harness error; many more than
  the server means its usage undercounts. Throughput and TPOT use the server's count
  wherever it gives one.
- Tokens per chunk, best source first: the server's per-chunk usage
  (``continuous_usage_stats``), one logprobs entry per token, the target's tokenizer (a
  local one, or ``/tokenize`` chunk by chunk, which can over-count tokens merged across a
  chunk boundary), else one per non-empty chunk (``assumed_one``); the source is recorded
  per request. Usage counts per chunk only when every token-carrying chunk has it; usage
  on the last chunk alone (or a final ``choices: []`` chunk) gives the output tokens only.
Only requests with status "ok" contribute latency samples.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeGuard

import numpy as np
import pandas as pd

from moeperf.collectors.records import RequestRecord
from moeperf.collectors.tables import flatten_list_column, list_column_lengths

NS_PER_S = 1e9


def _known(value: float | None) -> TypeGuard[float]:
    return value is not None and not pd.isna(value)


def effective_output_tokens(
    usage: float | None, client: float | None, chunk_tokens: Sequence[int] | None
) -> int | None:
    """Output tokens: server usage, else the client's count, else the per-chunk sum."""
    for value in (usage, client):
        if _known(value):
            return int(value)
    return int(np.sum(chunk_tokens)) if chunk_tokens is not None and len(chunk_tokens) else None


def token_gaps_s(
    chunk_ns: Sequence[int], chunk_tokens: Sequence[int], *, per_token: bool
) -> np.ndarray:
    """Gaps between token-carrying chunks in seconds: ITL samples (one per token of the
    later chunk, the gap divided over them) when ``per_token``, else ICL samples."""
    times = np.asarray(chunk_ns, dtype=np.int64)
    tokens = np.asarray(chunk_tokens, dtype=np.int64)
    carrying = tokens > 0
    times, tokens = times[carrying], tokens[carrying]
    if len(times) < 2:
        return np.empty(0)
    gaps_s = np.diff(times) / NS_PER_S
    if not per_token:
        return gaps_s
    later = tokens[1:]
    return np.repeat(gaps_s / later, later)


@dataclass(frozen=True, slots=True)
class RequestLatencies:
    """The derived metrics of one ok request (None where undefined), as in per_request."""

    ttft_s: float | None
    ttft_from_send_s: float | None
    queue_delay_s: float
    tpot_s: float | None
    e2e_s: float | None
    output_tokens: int | None
    itl_s: np.ndarray


def request_ttft_s(record: RequestRecord) -> float | None:
    """One ok record's TTFT, from its intended send (None: not ok, or no token), as
    ``request_latencies`` and ``per_request`` define it."""
    if record.status != "ok" or record.first_token_ns is None:
        return None
    return (record.first_token_ns - record.intended_send_ns) / NS_PER_S


def request_latencies(record: RequestRecord) -> RequestLatencies:
    """Derived metrics of one record, for live export as requests end."""
    queue_delay_s = (record.send_ns - record.intended_send_ns) / NS_PER_S
    tokens = effective_output_tokens(
        record.output_tokens, record.client_output_tokens, record.chunk_tokens
    )
    first, last = record.first_token_ns, record.last_token_ns
    if record.status != "ok" or first is None or last is None:
        return RequestLatencies(None, None, queue_delay_s, None, None, tokens, np.empty(0))
    tpot_s = (last - first) / NS_PER_S / (tokens - 1) if tokens and tokens >= 2 else None
    return RequestLatencies(
        ttft_s=request_ttft_s(record),
        ttft_from_send_s=(first - record.send_ns) / NS_PER_S,
        queue_delay_s=queue_delay_s,
        tpot_s=tpot_s,
        e2e_s=(last - record.intended_send_ns) / NS_PER_S,
        output_tokens=tokens,
        itl_s=token_gaps_s(record.chunk_ns, record.chunk_tokens, per_token=True),
    )


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
    # Server usage, else the client's count, else the sum over chunks, as in
    # effective_output_tokens() for one record.
    chunk_sums = pd.Series(_list_sums(requests["chunk_tokens"]), index=requests.index)
    chunk_sums = chunk_sums.where(list_column_lengths(requests["chunk_tokens"]) > 0)
    tokens = (
        requests["output_tokens"]
        .astype("float64")
        .fillna(requests["client_output_tokens"].astype("float64"))
        .fillna(chunk_sums)
    )

    out["output_tokens"] = tokens
    out["ttft_s"] = (first - intended) / NS_PER_S
    out["ttft_from_send_s"] = (first - sent) / NS_PER_S
    out["queue_delay_s"] = (sent - intended) / NS_PER_S
    out["tpot_s"] = ((last - first) / NS_PER_S / (tokens - 1)).where(tokens >= 2)
    out["e2e_s"] = (last - intended) / NS_PER_S
    return out


def request_output_rates(ok: pd.DataFrame) -> np.ndarray:
    """Each request's output rate, output tokens / (done - send) in tokens/s (NaN where it
    was in flight no time). ``ok``: ok requests; the gate's throughput metric (its mean,
    reports.samples) and a deployment sweep's comparison of arms read it."""
    tokens = per_request(ok)["output_tokens"].to_numpy(dtype=float)
    in_flight_s = (ok["done_ns"] - ok["send_ns"]).to_numpy(dtype=float) / NS_PER_S
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(in_flight_s > 0, tokens / in_flight_s, np.nan)


def itl_samples_s(requests: pd.DataFrame) -> pd.DataFrame:
    """Per-token inter-token latencies (columns: scenario, request_id, itl_s)."""
    return _gap_samples(requests, per_token=True, column="itl_s")


def icl_samples_s(requests: pd.DataFrame) -> pd.DataFrame:
    """Inter-chunk latencies between token-carrying chunks (scenario, request_id, icl_s)."""
    return _gap_samples(requests, per_token=False, column="icl_s")


def _list_sums(column: pd.Series) -> np.ndarray:
    lengths = list_column_lengths(column)
    flat = flatten_list_column(column)
    sums = np.zeros(len(column), dtype=np.int64)
    nonempty = lengths > 0
    if nonempty.any():
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])[nonempty]
        sums[nonempty] = np.add.reduceat(flat, starts)
    return sums


def _gap_samples(requests: pd.DataFrame, *, per_token: bool, column: str) -> pd.DataFrame:
    """``token_gaps_s`` for every ok request at once, vectorized over the flattened chunks
    (a run can hold a million requests)."""
    ok = requests[requests["status"] == "ok"]
    lengths = list_column_lengths(ok["chunk_ns"])
    times = flatten_list_column(ok["chunk_ns"])
    tokens = flatten_list_column(ok["chunk_tokens"])
    owner = np.repeat(np.arange(len(ok)), lengths)
    carrying = tokens > 0
    times, tokens, owner = times[carrying], tokens[carrying], owner[carrying]
    # A gap belongs to a request when both its chunks do.
    same = owner[1:] == owner[:-1]
    gaps_s = (np.diff(times) / NS_PER_S)[same]
    later = tokens[1:][same]
    owners = owner[1:][same]
    if per_token and not (later == 1).all():
        samples = np.repeat(gaps_s / later, later)
        owners = np.repeat(owners, later)
    else:  # one token per chunk (no MTP): ITL samples are the gaps themselves
        samples = gaps_s
    # Categoricals over the owning request: millions of samples, no string per sample.
    scenario_codes, scenarios = pd.factorize(ok["scenario"])
    return pd.DataFrame(
        {
            "scenario": pd.Categorical.from_codes(scenario_codes[owners], scenarios),
            "request_id": pd.Categorical.from_codes(owners, pd.Index(ok["request_id"])),
            column: samples,
        }
    )
