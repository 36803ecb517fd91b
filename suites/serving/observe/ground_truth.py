"""The harness's own measurement error, against the synthetic target's own stamps.

The synthetic server records when it received each request and when it wrote each token
chunk, with the same system-wide monotonic clock the harness uses, so on one host each
error is exact. The receive side (arrival - write) holds the kernel's loopback delivery,
which any client pays, and whatever the client's event loop adds before it takes the
timestamp; the send side (received - intended send) holds the client's queue, the
request's encoding and upload, and the server's pickup. Their sum is the total: the
client's TTFT against the server's received-to-first-write (MeasurementErrors).
"""

from __future__ import annotations

import typing
from typing import Any

import aiohttp
import numpy as np
import pandas as pd

from moeperf.collectors.harness_errors import HarnessError
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
    """Per-sample errors in seconds, with scenario and request_id: kind in {"send", "ttft",
    "ttft_total", "e2e_receive", "e2e_total", "itl", "chunk"} (MeasurementErrors defines
    each)."""
    rows: list[tuple[str, str, float, str]] = []
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
        scenario, rid = row["scenario"], row["request_id"]
        delays_s = (arrivals - writes) / 1e9
        received_ns = int(server["received_ns"]) - anchor_ns
        intended_ns = int(row["intended_send_ns"])
        send_s = (received_ns - intended_ns) / 1e9
        rows.append((scenario, "send", send_s, rid))
        rows.append((scenario, "ttft", float(delays_s[0]), rid))
        # (arrival - intended) - (write - received) = send + receive, term for term.
        rows.append((scenario, "ttft_total", send_s + float(delays_s[0]), rid))
        if server.get("done_ns") is not None:
            server_done_ns = int(server["done_ns"]) - anchor_ns
            e2e_receive_s = (int(row["done_ns"]) - server_done_ns) / 1e9
            rows.append((scenario, "e2e_receive", e2e_receive_s, rid))
            rows.append((scenario, "e2e_total", send_s + e2e_receive_s, rid))
        rows.extend((scenario, "chunk", float(d), rid) for d in delays_s)
        # ITL error: measured per-token gap minus the server's per-token gap.
        per_token_s = np.diff(delays_s) / tokens[1:]
        per_token = np.repeat(per_token_s, tokens[1:])
        rows.extend((scenario, "itl", float(e), rid) for e in per_token)
    return pd.DataFrame(rows, columns=["scenario", "kind", "error_s", "request_id"])


def request_errors(errors: pd.DataFrame) -> list[HarnessError]:
    """Each matched request's errors (``measurement_errors``'s rows, one record each)."""
    kinds = ("send", "ttft", "ttft_total", "e2e_total")
    per_request = errors[errors["kind"].isin(kinds)].pivot_table(
        index=["request_id", "scenario"], columns="kind", values="error_s", aggfunc="first"
    )
    out: list[HarnessError] = []
    for key, row in per_request.iterrows():
        request_id, scenario = typing.cast(tuple[str, str], key)
        e2e = row.get("e2e_total")
        out.append(
            HarnessError(
                request_id=str(request_id),
                scenario=str(scenario),
                send_s=float(row["send"]),
                receive_s=float(row["ttft"]),
                ttft_total_s=float(row["ttft_total"]),
                e2e_total_s=None if e2e is None or pd.isna(e2e) else float(e2e),
            )
        )
    return out


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
        send=of("send"),
        ttft_total=of("ttft_total"),
        e2e_receive=of("e2e_receive"),
        e2e_total=of("e2e_total"),
    )
