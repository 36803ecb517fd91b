"""``python benchmarks/gate_power.py``: how often the nightly gate catches a regression,
and how often it cries wolf, measured on this host (``tox -e gate-power``).

Every run is a real ``moeperf run`` of the shipped spec (``nightly`` by default) against
its embedded synthetic target, stored in ``--runs-dir``, and every comparison is the one
``moeperf gate RUN --baseline NAME`` makes (``reports.gate_output.judge_runs``: host and
spec checks, the spec's ``[gate] min_effects``, Benjamini-Hochberg over all metrics).

First ``--baselines`` plain runs are made; then the trials, round-robin over the
conditions so that a drift of the host falls on every condition alike:
- ``A/A``: the spec unchanged. "Flagged" is the run's verdict FAIL (any regression or a
  missing metric): the false-positive rate of a nightly that changed nothing.
- ``throughput -10%``: every delay of the target divided by 0.9 (TTFT and ITL), so each
  stream delivers its tokens 10% slower;
- ``TPOT p50 +10%``: the inter-token delay times 1.1;
- ``TTFT p99 +25%``: the time to first token times 1.25 (the whole distribution, so its
  p99 too).
Trial ``i`` is gated against baseline ``i mod --baselines``. For an injected condition,
"detected" means the gate called its own metric (per-request output rate mean, TPOT p50,
TTFT p99) a regression at one level or more; the run's FAIL rate is shown beside it (a
throughput drop also moves latencies, so other metrics may fail the run too). The
interval is Wilson's 95% score interval for a binomial proportion.

``--regate TRIALS_JSON`` runs nothing: it judges the stored trials of an earlier
``--json`` again, under the ``--min-effect`` values given, so that a minimum effect can be
tried on the same runs; with ``--pool-baselines``, against all the baseline runs pooled.

The target's jitter is seeded by the spec, so two runs draw the same delays for the same
request: what differs between A/A runs is the harness and the host, which is what a
nightly against the synthetic target exists to watch.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

from moeperf.collectors.errors import MoeperfError
from moeperf.collectors.store import RunInterrupted, RunStore
from moeperf.exits import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, exit_code
from moeperf.reports.gate_output import judge_runs, parse_min_effects
from moeperf.reports.runs import RunData, load_run
from moeperf.reports.samples import MetricSamples, pool_samples, run_samples
from moeperf.reports.verdicts import GateResult
from moeperf.specs import load_spec
from moeperf.suites.serving.runner import run_serving


@dataclass(frozen=True)
class Condition:
    """One arm of the study: what is injected into the target, and which metric should see it."""

    label: str
    injected: str  # in words, for the table
    ttft_factor: float = 1.0
    itl_factor: float = 1.0
    metric: str = ""  # the metric suffix the gate should flag, e.g. "tpot_s"
    statistic: str = ""

    def overrides(self, ttft_s: float, itl_s: float) -> list[str]:
        out = []
        if self.ttft_factor != 1.0:
            out.append(f"target.synthetic.ttft_s={ttft_s * self.ttft_factor!r}")
        if self.itl_factor != 1.0:
            out.append(f"target.synthetic.itl_s={itl_s * self.itl_factor!r}")
        return out


CONDITIONS = (
    Condition("A/A", "nothing"),
    Condition(
        "throughput -10%", "TTFT and ITL / 0.9", 1 / 0.9, 1 / 0.9, "request_output_tok_s", "mean"
    ),
    Condition("TPOT p50 +10%", "ITL x 1.1", itl_factor=1.1, metric="tpot_s", statistic="p50"),
    Condition("TTFT p99 +25%", "TTFT x 1.25", ttft_factor=1.25, metric="ttft_s", statistic="p99"),
)


@dataclass
class Trial:
    condition: str
    baseline_run: str
    candidate_run: str
    status: str  # the gate's: pass, fail, inconclusive
    detected: bool | None  # None for A/A
    levels_judged: int  # levels where the condition's metric got a decided outcome
    regressions: list[str] = field(default_factory=list)


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson's score interval of a proportion k/n (95% by default)."""
    if n == 0:
        return math.nan, math.nan
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def judge(condition: Condition, result: GateResult) -> tuple[bool | None, int]:
    """Whether the gate flagged the condition's own metric, and at how many levels it was
    decided (not inconclusive)."""
    if not condition.metric:
        return None, 0
    own = [
        v
        for v in result.verdicts
        if v.name.endswith(f"/{condition.metric}") and v.statistic == condition.statistic
    ]
    decided = [v for v in own if v.outcome not in ("inconclusive", "missing from candidate")]
    return any(v.outcome == "regression" for v in own), len(decided)


def study(
    spec_ref: str,
    trials: int,
    baselines: int,
    runs_dir: Path,
    say: Callable[[str], None],
    overrides: Sequence[str] = (),
    min_effects: Mapping[str, float] | None = None,
) -> list[Trial]:
    """Run the baselines and ``trials`` rounds of every condition; one Trial per
    candidate run. ``overrides`` (``--set``) apply to every run, before the injection;
    ``min_effects`` (``--min-effect``) win over the spec's, as in ``moeperf gate``."""
    store = RunStore(runs_dir)
    synthetic = load_spec(spec_ref, overrides).serving.target.synthetic

    def run(injected: Sequence[str]) -> str:
        loaded = load_spec(spec_ref, [*overrides, *injected])
        return run_serving(loaded.serving, loaded.given, store)

    base_ids = []
    for number in range(baselines):
        base_ids.append(run([]))
        say(f"baseline {number + 1}/{baselines}: {base_ids[-1]}")
    base_data = {run_id: load_run(store, run_id) for run_id in base_ids}
    out: list[Trial] = []
    try:
        for index in range(trials):
            for condition in CONDITIONS:
                run_id = run(condition.overrides(synthetic.ttft_s, synthetic.itl_s))
                base_id = base_ids[index % baselines]
                trial = gate_trial(condition, base_data[base_id], store, run_id, min_effects)
                out.append(trial)
                seen = "" if trial.detected is None else f", own metric flagged: {trial.detected}"
                say(f"trial {index + 1}/{trials} {condition.label}: {trial.status}{seen}")
    except (KeyboardInterrupt, RunInterrupted):
        say("interrupted: the table covers the trials that finished")
    return out


def gate_trial(
    condition: Condition,
    baseline: RunData,
    store: RunStore,
    run_id: str,
    min_effects: Mapping[str, float] | None = None,
    pooled: Sequence[MetricSamples] | None = None,
) -> Trial:
    """One candidate run gated against its baseline, as ``moeperf gate`` would (against
    the ``pooled`` samples of several baseline runs instead, when given)."""
    result = judge_runs(
        load_run(store, run_id),
        baseline,
        baseline_label=baseline.run_id,
        min_effects=min_effects,
        baseline_samples=pooled,
    )
    detected, levels = judge(condition, result)
    regressions = [v.key for v in result.regressions]
    return Trial(
        condition.label, baseline.run_id, run_id, result.status, detected, levels, regressions
    )


def regate(
    trials: Sequence[Trial],
    runs_dir: Path,
    min_effects: Mapping[str, float] | None,
    pool_baselines: bool = False,
) -> list[Trial]:
    """The same stored runs judged again, e.g. under other minimum effects: what the
    gate would have said of them, without running anything. ``pool_baselines``: every
    trial against the samples of all the study's baseline runs pooled (what a baseline
    recorded from several runs would give; ``baseline promote`` records one run)."""
    store = RunStore(runs_dir)
    conditions = {c.label: c for c in CONDITIONS}
    baselines = {t.baseline_run: load_run(store, t.baseline_run) for t in trials}
    pooled = None
    if pool_baselines:
        pooled = pool_samples(run_samples(run) for run in baselines.values())
    out = []
    for trial in trials:
        base = baselines[trial.baseline_run]
        condition = conditions[trial.condition]
        out.append(gate_trial(condition, base, store, trial.candidate_run, min_effects, pooled))
    return out


def table(
    trials: Sequence[Trial],
    spec_ref: str,
    overrides: Sequence[str] = (),
    min_effects: Sequence[str] = (),
    pooled: bool = False,
) -> Table:
    changed = f" with {', '.join(overrides)}" if overrides else ""
    if min_effects:
        changed += f", minimum effects {', '.join(min_effects)}"
    against = "all baseline runs pooled" if pooled else "a baseline run of the same job"
    t = Table(title=f"gate power: spec {spec_ref!r}{changed}, each trial gated against {against}")
    for header in (
        "condition",
        "injected",
        "trials",
        "run FAIL",
        "run INCONCLUSIVE",
        "own metric flagged",
        "levels deciding it",
        "rate (95% CI)",
    ):
        t.add_column(header, justify="left" if header in ("condition", "injected") else "right")
    for condition in CONDITIONS:
        rows = [x for x in trials if x.condition == condition.label]
        if not rows:
            continue
        n = len(rows)
        fails = sum(x.status == "fail" for x in rows)
        inconclusive = sum(x.status == "inconclusive" for x in rows)
        if condition.metric:
            hits = sum(bool(x.detected) for x in rows)
            own = f"{hits}/{n} ({condition.metric} {condition.statistic})"
            levels = "/".join(sorted({str(x.levels_judged) for x in rows}))
            rate_k = hits
        else:
            own, levels, rate_k = "-", "-", fails
        low, high = wilson(rate_k, n)
        rate = f"{rate_k / n:.0%} ({low:.0%}-{high:.0%})"
        t.add_row(
            condition.label,
            condition.injected,
            str(n),
            f"{fails}/{n}",
            f"{inconclusive}/{n}",
            own,
            levels,
            rate,
        )
    return t


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python benchmarks/gate_power.py",
        description=(
            "Detection rate of injected regressions and A/A false-positive rate of the gate, "
            "with real runs of a serving spec against its embedded synthetic target."
        ),
    )
    parser.add_argument("--spec", default="nightly", help="serving spec (default: nightly)")
    parser.add_argument("--trials", type=int, default=20, help="trials per condition (default 20)")
    parser.add_argument(
        "--baselines", type=int, default=4, help="baseline runs, used in turn (default 4)"
    )
    parser.add_argument("--runs-dir", type=Path, default=Path("runs/gate-power"))
    parser.add_argument("--json", type=Path, help="write every trial to this file")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="spec override for every run, as with moeperf run (the table then measures "
        "the spec so changed, not the shipped one)",
    )
    parser.add_argument(
        "--min-effect",
        action="append",
        default=[],
        metavar="KEY=FRACTION",
        help="minimum effect for every gate of the study, as in moeperf gate (repeatable)",
    )
    parser.add_argument(
        "--regate",
        type=Path,
        metavar="TRIALS_JSON",
        help="run nothing: judge the trials of an earlier --json again (their runs in "
        "--runs-dir), e.g. under other --min-effect values",
    )
    parser.add_argument(
        "--pool-baselines",
        action="store_true",
        help="with --regate: judge every trial against all the baseline runs pooled",
    )
    args = parser.parse_args(argv)
    console = Console()
    if not console.is_terminal:  # a log or a pipe: one table row a line, not wrapped at 80
        console = Console(width=160)
    if args.trials < 1 or args.baselines < 1:
        console.print("--trials and --baselines must be at least 1", markup=False)
        return EXIT_USAGE
    try:
        min_effects = parse_min_effects(args.min_effect)
        if args.regate is not None:
            earlier = [Trial(**x) for x in json.loads(args.regate.read_text(encoding="utf-8"))]
            judged = regate(earlier, args.runs_dir, min_effects, args.pool_baselines)
            return _finish(console, judged, args)
        spec = load_spec(args.spec, args.set).serving
        if spec.target.kind != "synthetic":
            console.print(
                f"spec {args.spec!r} targets {spec.target.kind!r}; the study injects its "
                "regressions into the synthetic target (target.kind = 'synthetic')",
                markup=False,
            )
            return EXIT_USAGE
        trials = study(
            args.spec,
            args.trials,
            args.baselines,
            args.runs_dir,
            console.print,
            args.set,
            min_effects,
        )
    except (KeyboardInterrupt, RunInterrupted):
        console.print(f"interrupted before any trial; the runs so far are in {args.runs_dir}")
        return EXIT_INTERRUPTED
    except MoeperfError as exc:
        console.print(f"error: {exc}", markup=False)
        return exit_code(exc)
    return _finish(console, trials, args)


def _finish(console: Console, trials: list[Trial], args: argparse.Namespace) -> int:
    pooled = args.regate is not None and args.pool_baselines
    console.print(table(trials, args.spec, args.set, args.min_effect, pooled))
    if args.json:
        args.json.write_text(json.dumps([asdict(x) for x in trials], indent=2), encoding="utf-8")
        console.print(f"written: {args.json}", markup=False)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
