"""Energy per output token as a gate metric, from the run's device samples and requests
(``reports.samples`` makes the metric of these samples).

``{level}/energy_per_output_token_j`` median, lower is better, class "energy"; kind
"optional" (a run without an accelerator source lacks it by definition, as MFU without a
peak). Its samples: the level's measured window (the same one as its throughput: first
actual send -> last completion of its measured requests) cut into ``SLICE_S`` slices; per
whole slice, the energy of all accelerators over it (``collectors.accel_figures``: each
device's energy counter, else the integral of its power) / the output tokens of the
level's ok measured requests whose chunks arrived in it (tokens counted where they
arrived, as the soak's windows count them). A slice without tokens, or whose energy
cannot be had, gives no sample; a level with fewer than ``MIN_SLICES`` samples has no
metric. The median of the slices, not the level's total ratio, so that the gate's
bootstrap and rank test have samples to work on; with a steady load they agree.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from moeperf.collectors.accel_figures import accelerator_figures
from moeperf.collectors.accel_records import AcceleratorFigures, DeviceSample
from moeperf.collectors.tables import flatten_list_column

SLICE_S = 1.0
MIN_SLICES = 3
_NS = 1_000_000_000


def energy_per_token_slices(
    requests: pd.DataFrame, accelerator: Sequence[DeviceSample]
) -> dict[str, np.ndarray]:
    """Per level with at least ``MIN_SLICES`` of them, its slices' J per output token."""
    if not len(requests) or not any(s.source != "process" for s in accelerator):
        return {}
    measured = requests[requests["phase"] == "measure"]
    out = {}
    for scenario in dict.fromkeys(requests["scenario"]):
        values = _slice_values(measured[measured["scenario"] == scenario], accelerator)
        if len(values) >= MIN_SLICES:
            out[str(scenario)] = values
    return out


def _slice_values(level: pd.DataFrame, accelerator: Sequence[DeviceSample]) -> np.ndarray:
    if not len(level):
        return np.empty(0)
    start_ns, end_ns = int(level["send_ns"].min()), int(level["done_ns"].max())
    edges = np.arange(start_ns, end_ns + 1, int(SLICE_S * _NS), dtype=np.int64)
    if len(edges) < 2:
        return np.empty(0)
    ok = level[level["status"] == "ok"]
    arrived = flatten_list_column(ok["chunk_ns"])
    tokens = flatten_list_column(ok["chunk_tokens"])
    per_slice, _ = np.histogram(arrived, bins=edges, weights=tokens)
    values = []
    for k in range(len(edges) - 1):
        if per_slice[k] <= 0:
            continue
        figures = accelerator_figures(accelerator, int(edges[k]), int(edges[k + 1]))
        if isinstance(figures, AcceleratorFigures) and figures.energy_j is not None:
            values.append(figures.energy_j / per_slice[k])
    return np.asarray(values, dtype=float)
