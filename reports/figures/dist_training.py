"""Distributed training (suite "training-dist"; every figure measured on this host, each
rank a process, the ranks talking over gloo on loopback): the job view of each scenario
(layout x policy x skew), its ranks, its failures and the host's links, from the run's
summary (``collectors.dist_training_summary``, whose docstring defines each figure), and
one chart from the step records.

Tables. Per scenario: tokens/s, effective tokens/s as summarized; the time shares
(compute, all-to-all, pipeline send/recv, all-reduce, wait; comm is the four that are not
compute), the bubble, MFU and OOM rate as percentages to 0.1, the bubble beside
(p - 1) / (m + p - 1); each rank's peak memory in MiB (2^20 bytes), in rank order. Per
scenario's ranks: each rank's median compute seconds, the slowest rank, the straggler
spread (%). Per failure: detect in ms, resume in s, and "k/n": k of the n rank-step records run
again after the failure whose loss is bit-equal to the first run's (0/0: none ran again).
Links: bytes / seconds in MB/s (10^6 bytes).

Time per step by rank: one stacked bar per scenario and rank ("scenario · rank r"), the
mean over that rank's step records (every execution, replays included; only records with a
compute time, i.e. of the distributed trainer) of each kind's seconds, a missing kind
counted as 0. Compute is the step less the other kinds, so a bar's height is the rank's
mean step time.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from moeperf.collectors.dist_training_summary import DistTrainingSummary, TimeShares
from moeperf.reports.figures.text import color, empty, plotly_text, styled

MIB = 2**20
TITLE = "Time per step by rank (measured)"
# (column of the steps frame, label), in stacking order from the bottom.
TIME_KINDS = (
    ("compute_s", "compute"),
    ("all_to_all_s", "all-to-all"),
    ("pipeline_s", "send/recv"),
    ("all_reduce_s", "all-reduce"),
    ("wait_s", "wait"),
)


def _pct(value: float | None) -> float | None:
    """A fraction as a percentage to 0.1 (as the CLI's tables show it)."""
    return None if value is None else round(value * 100, 1)


def _share(shares: TimeShares | None, kind: str) -> float | None:
    return None if shares is None else _pct(getattr(shares, kind))


def layout_frame(summary: DistTrainingSummary) -> pd.DataFrame:
    """One row per scenario: throughput, MFU, time shares (%), bubble (%), memory, OOMs."""
    rows = []
    for name, s in summary.scenarios.items():
        shares = s.shares
        rows.append(
            {
                "scenario": name,
                "layout": s.layout,
                "policy": s.policy,
                "skew": s.skew,
                "ranks": s.world_size,
                "steps": s.steps,
                "tokens/s": s.tokens_per_s,
                "effective tokens/s": s.effective_tokens_per_s,
                "MFU %": _pct(s.mfu),
                "comm %": None if shares is None else _pct(shares.communication),
                "all-to-all %": _share(shares, "all_to_all"),
                "send/recv %": _share(shares, "pipeline"),
                "all-reduce %": _share(shares, "all_reduce"),
                "wait %": _share(shares, "wait"),
                "bubble %": _pct(s.bubble),
                "bubble (p-1)/(m+p-1) %": _pct(s.bubble_formula),
                "peak MiB by rank": ", ".join(
                    f"{b / MIB:.1f}" for b in s.peak_memory_bytes_by_rank
                ),
                "OOM rate %": _pct(s.oom_rate),
            }
        )
    return pd.DataFrame(rows)


def rank_frame(summary: DistTrainingSummary) -> pd.DataFrame:
    """One row per scenario: its ranks' median compute seconds, the slowest, the spread."""
    rows = [
        {
            "scenario": name,
            "compute s p50 by rank": ", ".join(f"{v:.3f}" for v in s.compute_s_p50_by_rank),
            "slowest rank": s.slowest_rank,
            "straggler spread %": _pct(s.straggler_spread),
            "job step s p50": s.job_step_s_p50,
            "loss first": s.loss_first,
            "loss last": s.loss_last,
        }
        for name, s in summary.scenarios.items()
    ]
    return pd.DataFrame(rows)


def recovery_frame(summary: DistTrainingSummary) -> pd.DataFrame | None:
    """One row per failure of any scenario; None when no job failed."""
    rows = [
        {
            "scenario": name,
            "cause": r.cause,
            "rank": r.rank,
            "at step": r.step,
            "restored from": r.restored_step,
            "steps replayed": r.steps_replayed,
            "detect ms": r.detect_s * 1e3,
            "resume s": r.resume_s,
            "replayed losses bit-equal": f"{r.replayed_losses_equal}/{r.replayed_records}",
            "what happened": r.message,
        }
        for name, s in summary.scenarios.items()
        for r in s.recoveries
    ]
    return pd.DataFrame(rows) if rows else None


def _mb_s(bytes_per_s: float | None) -> float | None:
    return None if bytes_per_s is None else bytes_per_s / 1e6


def link_frame(summary: DistTrainingSummary) -> pd.DataFrame:
    """One row per link the run measured: its rate and the bytes it was measured on."""
    link = summary.link
    return pd.DataFrame(
        [
            {
                "link": "all-to-all (token payload)",
                "MB/s": _mb_s(link.all_to_all_bytes_per_s),
                "bytes": link.all_to_all_bytes,
                "measured as": "payload bytes / all-to-all seconds, every rank and step",
            },
            {
                "link": "pipeline send/recv",
                "MB/s": _mb_s(link.pipeline_bytes_per_s),
                "bytes": link.pipeline_message_bytes,
                "measured as": "one message / its one-way time: a ping-pong between "
                "neighbouring stages, best of several",
            },
            {
                "link": "all-reduce (gradients)",
                "MB/s": _mb_s(link.all_reduce_bytes_per_s),
                "bytes": link.all_reduce_bytes,
                "measured as": "gradient buffer bytes / all-reduce seconds, every rank and step",
            },
        ]
    )


def time_split_frame(steps: pd.DataFrame) -> pd.DataFrame:
    """Per scenario and rank (scenarios in order of appearance, ranks ascending): the mean
    seconds per step of each time kind over the records with a compute time."""
    columns = ["scenario", "rank", "records", *(c for c, _ in TIME_KINDS)]
    if steps.empty or "compute_s" not in steps.columns:
        return pd.DataFrame(columns=columns)
    rows = steps[steps["compute_s"].notna()]
    if rows.empty:
        return pd.DataFrame(columns=columns)
    kinds = [c for c, _ in TIME_KINDS]
    times = rows[kinds].astype(float).fillna(0.0)
    times["scenario"] = rows["scenario"].astype(str)
    times["rank"] = rows["rank"].astype(int)
    grouped = times.groupby(["scenario", "rank"], sort=False)
    frame = grouped[kinds].mean()
    frame.insert(0, "records", grouped.size())
    frame = frame.reset_index()
    order = {name: i for i, name in enumerate(times["scenario"].unique())}
    frame["_order"] = frame["scenario"].map(order)
    frame = frame.sort_values(["_order", "rank"], kind="stable").drop(columns="_order")
    return frame[columns].reset_index(drop=True)


def bar_label(scenario: str, rank: int) -> str:
    """A bar's x label, as text Plotly shows literally."""
    return plotly_text(f"{scenario} · rank {rank}")


def time_split_chart(steps: pd.DataFrame) -> go.Figure:
    """Stacked bars: each rank's mean seconds per step, split by what the time went to."""
    frame = time_split_frame(steps)
    if frame.empty:
        return empty(TITLE, "no step records with a time split")
    labels = [bar_label(s, r) for s, r in zip(frame["scenario"], frame["rank"], strict=True)]
    fig = go.Figure()
    for index, (column, label) in enumerate(TIME_KINDS):
        fig.add_trace(
            go.Bar(
                x=labels,
                y=frame[column].to_numpy(float),
                name=label,
                marker={"color": color(index)},
                customdata=frame["records"].to_numpy(int),
                hovertemplate="%{x}<br>" + label + ": %{y:.4f} s per step"
                "<br>mean of %{customdata} records<extra></extra>",
            )
        )
    fig.update_layout(barmode="stack")
    fig.update_xaxes(type="category", tickangle=-30)
    fig.update_yaxes(title_text="seconds per step (mean)")
    return styled(fig, TITLE, height=460)
