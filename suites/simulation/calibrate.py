"""Fitting the simulator's free constants on a spec's calibration rows.

The constants a spec names (``[calibration] fit``: GEMM efficiency in BF16 and in FP8, link
efficiency) are chosen by least squares on ``log(simulated / published)`` over the rows
marked ``role = "calibration"`` (scipy's trust-region reflective method, each constant
bounded to (0.05, 1]); every published row that does not set a constant itself is then
simulated with the fitted ones. The rows held out (``role = "validation"``) are what the
simulator's accuracy is read from; the spec allows at most a third of the rows to fit.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from moeperf.collectors.simulation_summary import Accuracy, Calibration, Reproduction
from moeperf.suites.simulation.compute import published_figure
from moeperf.suites.simulation.spec import CalibrationSettings, ReproduceSpec
from moeperf.targets.cluster_sim.config import SimConfig
from moeperf.targets.cluster_sim.simulate import JobSpec, simulate

LOWEST, HIGHEST = 0.05, 1.0
NOT_COMPLETED_LOG_ERROR = math.log(1e-3)  # a row that runs out of memory: far off, not NaN
TOLERANCE = 0.15  # issue 42: every validation row within +-15% of its published figure


def configured(row: ReproduceSpec, constants: dict[str, float]) -> SimConfig:
    """The row's config with the fitted constants it does not set itself."""
    cfg = row.config()
    own: dict[str, Any] = {n: v for n, v in constants.items() if getattr(row, n) is None}
    return dataclasses.replace(cfg, cluster=dataclasses.replace(cfg.cluster, **own))


def simulated_metric(row: ReproduceSpec, cfg: SimConfig, iterations: int) -> float | None:
    """The row's figure as the run reports it (compute.published_figure), with no
    checkpoint write among its iterations."""
    job = JobSpec(policy=row.policy, skew=row.skew, iterations=iterations,
                  checkpoint_every=iterations + 1)  # fmt: skip
    return published_figure(row.metric, simulate(cfg, job))


def fit(
    rows: Sequence[ReproduceSpec], settings: CalibrationSettings, say: Callable[[str], None]
) -> Calibration:
    """The constants of ``settings.fit`` that best reproduce ``rows`` (module docstring)."""
    names: list[str] = list(settings.fit)
    evaluations = 0

    def residuals(x: np.ndarray) -> np.ndarray:
        nonlocal evaluations
        constants = dict(zip(names, (float(v) for v in x), strict=True))
        out = []
        for row in rows:
            evaluations += 1
            value = simulated_metric(row, configured(row, constants), settings.iterations)
            error = NOT_COMPLETED_LOG_ERROR if value is None else math.log(value / row.published)
            out.append(error)
        return np.array(out)

    start = np.full(len(names), 0.6)
    say(f"calibrating {', '.join(names)} on {len(rows)} published rows")
    found = least_squares(residuals, start, bounds=(LOWEST, HIGHEST), diff_step=[1e-3] * len(names),
                          max_nfev=settings.max_evaluations)  # fmt: skip
    constants = {name: round(float(v), 4) for name, v in zip(names, found.x, strict=True)}
    rms = float(np.sqrt(np.mean(residuals(np.array(list(constants.values()))) ** 2)))
    # d residual / d x at the fit, times x: each row's elasticity to each constant.
    elasticity = np.asarray(found.jac) * found.x[None, :]
    sensitivity = {n: round(float(np.max(np.abs(elasticity[:, j]))), 3)
                   for j, n in enumerate(names)}  # fmt: skip
    at_bound = [n for n, v in constants.items() if min(v - LOWEST, HIGHEST - v) < 1e-3]
    return Calibration(constants, [r.name for r in rows], rms, evaluations, sensitivity, at_bound)


def accuracy(reproductions: Sequence[Reproduction]) -> Accuracy | None:
    """The validation rows' errors; None without validation rows."""
    held_out = [r for r in reproductions if r.role == "validation"]
    if not held_out:
        return None
    # A row that ran out of memory completed nothing: an error of -100%.
    errors = [r.error if r.error is not None else -1.0 for r in held_out]
    sizes = [abs(e) for e in errors]
    worst = int(np.argmax(sizes))
    return Accuracy(
        rows=len(held_out), within_tolerance=sum(e <= TOLERANCE for e in sizes),
        tolerance=TOLERANCE, median_abs_error=float(np.median(sizes)),
        worst=held_out[worst].name, worst_error=errors[worst],
    )  # fmt: skip
