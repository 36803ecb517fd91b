"""Per-scenario summary of a serving run: counts, throughput, goodput, latency quantiles.

Definitions (quoted by the docs' metric definitions page and every report's appendix):
- Only requests in the "measure" phase count; warm-up and cool-down requests are stored
  but excluded.
- Window: first actual send -> last completion among the measured requests.
- Output throughput: output tokens of ok requests / window. Request throughput: ok
  requests / window.
- Goodput: requests that are ok and meet every SLO given / window; ``goodput_ratio`` is
  the same count over all measured requests, failures included in the denominator. A
  request with fewer than 2 output tokens has no TPOT and is judged on the other SLOs.
"""

from __future__ import annotations

import pandas as pd

from moeperf.collectors.latency import (
    NS_PER_S,
    RequestLatencies,
    icl_samples_s,
    itl_samples_s,
    per_request,
)
from moeperf.collectors.quantiles import Described, describe
from moeperf.collectors.serving_records import (
    NO_SLO,
    LatencySummary,
    ScenarioSummary,
    ServingSummary,
    Slo,
    TokenDiscrepancy,
)


def request_meets_slo(metrics: RequestLatencies, slo: Slo) -> bool:
    """One ok request against the SLOs: the single-record form of ``_meets_slo``."""
    if slo.ttft_s is not None and (metrics.ttft_s is None or metrics.ttft_s > slo.ttft_s):
        return False
    if slo.tpot_s is not None and metrics.tpot_s is not None and metrics.tpot_s > slo.tpot_s:
        return False
    return slo.e2e_s is None or (metrics.e2e_s is not None and metrics.e2e_s <= slo.e2e_s)


def _meets_slo(metrics: pd.DataFrame, slo: Slo) -> pd.Series:
    good = metrics["status"] == "ok"
    if slo.ttft_s is not None:
        good &= metrics["ttft_s"] <= slo.ttft_s
    if slo.tpot_s is not None:
        good &= metrics["tpot_s"].isna() | (metrics["tpot_s"] <= slo.tpot_s)
    if slo.e2e_s is not None:
        good &= metrics["e2e_s"] <= slo.e2e_s
    return good


def summarize_scenario(requests: pd.DataFrame, slo: Slo = NO_SLO) -> ScenarioSummary:
    """Summary of the measured requests of one scenario (load level)."""
    measured = requests[requests["phase"] == "measure"]
    metrics = per_request(measured)
    ok = metrics["status"] == "ok"
    window_s = 0.0
    if len(measured):
        window_s = (measured["done_ns"].max() - measured["send_ns"].min()) / NS_PER_S
    good = int(_meets_slo(metrics, slo).sum())
    output_tokens = float(metrics.loc[ok, "output_tokens"].sum())

    def per_second(count: float) -> float | None:
        return count / window_s if window_s > 0 else None

    def latency(name: str) -> Described:
        return describe(metrics.loc[ok, name])

    errors = metrics.loc[metrics["status"] == "error", "error_type"].value_counts()
    return ScenarioSummary(
        requests=len(measured),
        ok=int(ok.sum()),
        errors=int((metrics["status"] == "error").sum()),
        cancelled=int((metrics["status"] == "cancelled").sum()),
        error_types={str(k): int(v) for k, v in errors.items()},
        excluded_warmup=int((requests["phase"] == "warmup").sum()),
        excluded_cooldown=int((requests["phase"] == "cooldown").sum()),
        window_s=float(window_s),
        output_tokens=output_tokens,
        output_throughput_tok_s=per_second(output_tokens),
        request_throughput_rps=per_second(int(ok.sum())),
        goodput_rps=per_second(good),
        goodput_ratio=good / len(measured) if len(measured) else None,
        slo=slo,
        output_token_discrepancy=_token_discrepancy(measured[measured["status"] == "ok"]),
        latency_s=LatencySummary(
            ttft_s=latency("ttft_s"),
            ttft_from_send_s=latency("ttft_from_send_s"),
            queue_delay_s=latency("queue_delay_s"),
            tpot_s=latency("tpot_s"),
            e2e_s=latency("e2e_s"),
            itl_s=describe(itl_samples_s(measured)["itl_s"]),
            icl_s=describe(icl_samples_s(measured)["icl_s"]),
        ),
    )


def _token_discrepancy(ok: pd.DataFrame) -> TokenDiscrepancy:
    """Server usage against the client's own count, where both exist."""
    both = ok.dropna(subset=["output_tokens", "client_output_tokens"])
    diff = both["client_output_tokens"] - both["output_tokens"]
    return TokenDiscrepancy(
        compared=len(both),
        differing=int((diff != 0).sum()),
        mean_client_minus_server=float(diff.mean()) if len(both) else None,
        client_fewer=int((diff < 0).sum()),
        client_more=int((diff > 0).sum()),
    )


def summarize_requests(requests: pd.DataFrame, slo: Slo = NO_SLO) -> ServingSummary:
    """Summaries of every scenario in run order, with the estimators named."""
    scenarios = list(dict.fromkeys(requests["scenario"]))
    return ServingSummary(
        scenarios={
            name: summarize_scenario(requests[requests["scenario"] == name], slo)
            for name in scenarios
        }
    )
