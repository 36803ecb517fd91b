"""The harness's own measurement error, against the synthetic target's write times.

The synthetic server records when it wrote each token chunk, with the same system-wide
monotonic clock the harness uses for arrivals, so on one host the per-chunk error is
exact: arrival - write. It includes the kernel's loopback delivery, which any client
pays, and whatever the client's event loop adds before it takes the timestamp.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import numpy as np
import pandas as pd

from moeperf.collectors.quantiles import Described, describe
from moeperf.collectors.serving_records import MeasurementErrors

_BATCH = 2000


async def fetch_ground_truth(base_url: str, ids: list[str]) -> dict[str, dict[str, Any]]:
    """Write-time records for the server response ids given (missing ones are left out)."""
    records: dict[str, dict[str, Any]] = {}
    url = base_url.rstrip("/") + "/ground_truth/query"
    async with aiohttp.ClientSession() as session:
        for start in range(0, len(ids), _BATCH):
            async with session.post(url, json={"ids": ids[start : start + _BATCH]}) as response:
                response.raise_for_status()
                records.update((await response.json())["records"])
    return records


def measurement_errors(
    requests: pd.DataFrame, truth: dict[str, dict[str, Any]], anchor_ns: int
) -> pd.DataFrame:
    """Per-sample errors in seconds: kind in {"ttft", "itl", "chunk"}, with scenario."""
    rows: list[tuple[str, str, float]] = []
    for _, row in requests[requests["status"] == "ok"].iterrows():
        server = truth.get(row["server_request_id"])
        if server is None:
            continue
        tokens = np.asarray(row["chunk_tokens"])
        arrivals = np.asarray(row["chunk_ns"])[tokens > 0]
        tokens = tokens[tokens > 0]
        writes = np.asarray(server["chunk_write_ns"], dtype=np.int64) - anchor_ns
        if len(writes) != len(arrivals) or list(server["chunk_tokens"]) != list(tokens):
            continue  # not comparable chunk by chunk; counted as unmatched
        scenario = row["scenario"]
        delays_s = (arrivals - writes) / 1e9
        rows.append((scenario, "ttft", float(delays_s[0])))
        rows.extend((scenario, "chunk", float(d)) for d in delays_s)
        # ITL error: measured per-token gap minus the server's per-token gap.
        per_token_s = np.diff(delays_s) / tokens[1:]
        rows.extend((scenario, "itl", float(e)) for e in np.repeat(per_token_s, tokens[1:]))
    return pd.DataFrame(rows, columns=["scenario", "kind", "error_s"])


def summarize_errors(errors: pd.DataFrame, requests_ok: int) -> MeasurementErrors:
    """Quantiles of each error kind, and how many ok requests could be matched."""
    matched = int((errors["kind"] == "ttft").sum())

    def of(kind: str) -> Described:
        return describe(errors.loc[errors["kind"] == kind, "error_s"])

    return MeasurementErrors(
        matched_requests=matched,
        unmatched_requests=requests_ok - matched,
        ttft=of("ttft"),
        itl=of("itl"),
        chunk=of("chunk"),
    )
