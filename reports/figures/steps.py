"""Training step records (``collectors.records.StepRecord`` rows) grouped per step.

A step's records (one per rank) are combined: its time is the span from the earliest
start to the latest end (the slowest rank), its tokens their sum, its MFU their mean, its
peak memory their maximum. Micro-batch records are used for these only when a run has no
whole-step records (``microbatch`` unset), as in the gate's samples; events count from
every record. A step trained again after a restart (same step and rank, a later record)
counts once, as its last attempt: the lost attempt's time is in the restart's ``lost_s``.
The policy of a step is its record's ``scenario`` ("default"
when empty). Events are ``{"kind": ...}`` dicts; a restart's ``lost_s`` is the time lost
to restart and replay. One restart stops every rank, so a step's lost time is the largest
any of its records reports, not their sum.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

NS_PER_S = 1e9
STEP_COLUMNS = (
    "policy",
    "step",
    "start_s",
    "time_s",
    "tokens",
    "mfu",
    "peak_memory_bytes",
    "lost_s",
    "ooms",
    "restarts",
)
EVENT_COLUMNS = ("policy", "step", "rank", "kind", "t_s", "lost_s", "detail")


def policies(steps: pd.DataFrame) -> pd.Series:
    """The policy of each record: its scenario, or "default"."""
    return steps["scenario"].fillna("").astype(str).replace("", "default")


def _events(value: Iterable[object] | float | None) -> list[dict[str, Any]]:
    """A record's events: a list of event objects, or a null (None, or the NaN pandas
    puts in an object column) for none."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return []
    if isinstance(value, float):
        raise TypeError(f"events must be a list of objects, not {value!r}")
    return [e for e in value if isinstance(e, dict)]


def _lost_s(events: list[dict]) -> float:
    return float(sum(float(e.get("lost_s") or 0.0) for e in events if e.get("kind") == "restart"))


def _count(events: list[dict], kind: str) -> int:
    return sum(1 for e in events if e.get("kind") == kind)


def _last_attempts(steps: pd.DataFrame) -> pd.DataFrame:
    """Per (scenario, step, rank, micro-batch), the record that started last."""
    keys = [c for c in ("scenario", "step", "rank", "microbatch") if c in steps.columns]
    ordered = steps.assign(_policy=policies(steps)).sort_values("start_ns", kind="stable")
    keys = ["_policy" if k == "scenario" else k for k in keys]
    return ordered.drop_duplicates(keys, keep="last").drop(columns="_policy")


def _whole_steps(steps: pd.DataFrame) -> pd.DataFrame:
    if "microbatch" not in steps.columns:
        return steps
    whole = steps["microbatch"].isna()
    return steps[whole] if whole.any() else steps


def step_table(steps: pd.DataFrame) -> pd.DataFrame:
    """One row per (policy, step) in order of first start (see the module docstring)."""
    if steps.empty:
        return pd.DataFrame(columns=STEP_COLUMNS)
    origin = steps["start_ns"].min()
    events = steps["events"].map(_events)
    counted = pd.DataFrame(
        {
            "policy": policies(steps).to_numpy(),
            "step": steps["step"].to_numpy(),
            "lost_s": events.map(_lost_s).to_numpy(float),
            "ooms": events.map(lambda e: _count(e, "oom")).to_numpy(),
            "restarts": events.map(lambda e: _count(e, "restart")).to_numpy(),
        }
    ).groupby(["policy", "step"], sort=False)
    whole = _last_attempts(_whole_steps(steps))
    records = pd.DataFrame(
        {
            "policy": policies(whole).to_numpy(),
            "step": whole["step"].to_numpy(),
            "start_ns": whole["start_ns"].to_numpy(np.int64),
            "end_ns": whole["end_ns"].to_numpy(np.int64),
            "tokens": whole["tokens"].to_numpy(float),
            "mfu": pd.to_numeric(whole["mfu"], errors="coerce").to_numpy(float),
            "peak": pd.to_numeric(whole["peak_memory_bytes"], errors="coerce").to_numpy(float),
        }
    )
    table = records.groupby(["policy", "step"], sort=False).agg(
        start_ns=("start_ns", "min"),
        end_ns=("end_ns", "max"),
        tokens=("tokens", "sum"),
        mfu=("mfu", "mean"),
        peak_memory_bytes=("peak", "max"),
    )
    # One restart stops every rank: the step lost the most any record says, not the sum.
    table = table.join(
        counted.agg(lost_s=("lost_s", "max"), ooms=("ooms", "sum"), restarts=("restarts", "max"))
    ).reset_index()
    table["start_s"] = (table["start_ns"] - origin) / NS_PER_S
    table["time_s"] = (table["end_ns"] - table["start_ns"]) / NS_PER_S
    table = table.sort_values("start_ns", kind="stable", ignore_index=True)
    return table[list(STEP_COLUMNS)]


def event_table(steps: pd.DataFrame) -> pd.DataFrame:
    """Every event of every record: when (``at_ns`` if given, else the record's end, in
    seconds from the first step's start), its kind, lost time and the rest as text."""
    rows = []
    if steps.empty:
        return pd.DataFrame(columns=EVENT_COLUMNS)
    origin = steps["start_ns"].min()
    names = policies(steps)
    for position, (events, end_ns) in enumerate(zip(steps["events"], steps["end_ns"], strict=True)):
        for event in _events(events):
            at = event.get("at_ns")
            at_ns = int(at) if isinstance(at, int | float) else int(end_ns)
            rest = {k: v for k, v in event.items() if k not in ("kind", "at_ns", "lost_s")}
            rows.append(
                {
                    "policy": names.iloc[position],
                    "step": steps["step"].iloc[position],
                    "rank": steps["rank"].iloc[position],
                    "kind": str(event.get("kind", "unknown")),
                    "t_s": (at_ns - origin) / NS_PER_S,
                    "lost_s": float(event.get("lost_s") or 0.0),
                    "detail": ", ".join(f"{k}={v}" for k, v in rest.items()),
                }
            )
    return pd.DataFrame(rows, columns=EVENT_COLUMNS)
