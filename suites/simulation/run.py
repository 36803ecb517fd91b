"""Runs a simulation spec: every job under every policy and skew, then the published runs,
through the cluster simulator; one run directory of simulated StepRecords and a summary.

Nothing here is measured on hardware: each StepRecord is flagged ``simulated``, its clock is
the simulated one (iterations laid end to end from 0, restarts and checkpoint writes
included), and the run's target says ``cluster_sim``. The one measured figure is the
dual-batch planner's decision time, host seconds on this machine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from moeperf.collectors.records import StepRecord
from moeperf.collectors.simulation_summary import NotTaken, SimulationSummary
from moeperf.collectors.store import RunStore, RunWriter, interrupts_end_runs
from moeperf.suites.run_options import RunOptions
from moeperf.suites.simulation.calibrate import accuracy, configured, fit
from moeperf.suites.simulation.compute import ablation, reproduction, scenario_of
from moeperf.suites.simulation.spec import JobSpec, SimulationSpec
from moeperf.targets.cluster_sim.simulate import JobResult, simulate
from moeperf.targets.cluster_sim.simulate import JobSpec as SimJob

Say = Callable[[str], None]

ASSUMPTIONS = (
    "All figures are simulated by targets/cluster_sim (a roofline per operator, a "
    "discrete-event 1F1B pipeline, activation bytes per Korthikanti et al. with MoE terms "
    "that grow with the realized per-rank load); none is measured.",
    "GEMM and link efficiencies are assumptions (0.6 and 0.7 of peak) unless a job sets "
    "them or the spec's [calibration] fits them (then its rows say which); one efficiency "
    "per precision, whatever a GEMM's shape.",
    "A job's recipe (targets/cluster_sim/recipe.py) turns on what its run used: FP8 GEMMs "
    "and dispatch, DeepEP's dispatcher, the 1F1B all-to-all overlap, tensor-parallel "
    "overlap, the data-parallel reduction charged or overlapped; off, the reduction is "
    "taken as hidden under backward and nothing else overlaps.",
    "Not modelled: DualPipe's bidirectional schedule, memory-bound non-GEMM work (norms, "
    "permutation, activations), kernel launch gaps, stragglers other than routing skew, "
    "network contention between jobs.",
)


def run_simulation(
    spec: SimulationSpec,
    spec_given: dict[str, Any],
    store: RunStore,
    options: RunOptions = RunOptions(),  # noqa: B008 (frozen: one shared default is safe)
) -> str:
    """Run ``spec`` into one run; return its id. It exports nothing live
    (``options.pushgateway_url`` is not used)."""
    on_started, say = options.on_started, options.say
    target = {"kind": "cluster_sim", "simulated": True, "model": _models(spec)}
    run = store.create(
        "simulation",
        spec_given=spec_given,
        spec_resolved=spec.model_dump(mode="json"),
        target=target,
    )
    on_started(run)
    with run, interrupts_end_runs():
        run.add_note(
            "Simulated, not measured: every step record of this run is flagged simulated "
            "and its clock is the simulator's."
        )
        summary = SimulationSummary(assumptions=list(ASSUMPTIONS))
        for job in spec.job:
            for skew in spec.sim.skews:
                for policy in spec.sim.policies:
                    name = f"{job.name}/{policy}/{skew}"
                    say(f"simulating {name}: {job.devices:,} devices, {spec.sim.iterations} it.")
                    result = simulate(job.config(), _sim_job(spec, policy, skew))
                    _write_steps(run, name, result)
                    summary.scenarios[name] = scenario_of(job.name, result)
        jobs = [j.name for j in spec.job]
        summary.ablation = ablation(summary.scenarios, jobs, spec.sim.skews, spec.sim.baseline)
        constants: dict[str, float] = {}
        if spec.calibration is not None:
            calibrating = [r for r in spec.reproduce if r.role == "calibration"]
            summary.calibration = fit(calibrating, spec.calibration, say)
            constants = summary.calibration.constants
            fitted = ", ".join(f"{k} {v:.3f}" for k, v in constants.items())
            run.add_note(f"Calibrated on {len(calibrating)} published rows: {fitted}.")
        for published in spec.reproduce:
            say(f"simulating {published.name} ({published.devices:,} devices)")
            cfg = configured(published, constants)
            result = simulate(cfg, _sim_job(spec, published.policy, published.skew))
            _write_steps(run, f"{published.name}/{published.policy}/{published.skew}", result)
            summary.reproductions.append(reproduction(published, result))
        summary.not_taken = [
            NotTaken(n.name, n.published, n.metric, n.source, n.reason) for n in spec.not_taken
        ]
        summary.accuracy = accuracy(summary.reproductions)
        run.write_summary(summary)
    return run.run_id


def _models(spec: SimulationSpec) -> list[str]:
    jobs: list[JobSpec] = [*spec.job, *spec.reproduce]
    return sorted({j.model for j in jobs})


def _sim_job(spec: SimulationSpec, policy: Any, skew: Any) -> SimJob:
    s = spec.sim
    return SimJob(
        policy=policy, skew=skew, iterations=s.iterations, seed=s.seed,
        checkpoint_every=s.checkpoint_every, checkpoint_write_s=s.checkpoint_write_s,
        restart_s=s.restart_s, replay_counts=s.replay_counts() if skew == "replay" else None,
    )  # fmt: skip


def _write_steps(run: RunWriter, scenario: str, result: JobResult) -> None:
    """One simulated StepRecord per iteration, on the simulated clock: an OOM iteration
    carries its restart (the lost work and the restart cost) and the clock moves past it."""
    clock_s = 0.0
    checkpoint_every = result.job.checkpoint_every
    for r in result.iterations:
        lost_s = result.lost_per_oom_s.get(r.iteration, 0.0)
        events: list[dict[str, Any]] = []
        if r.oom:
            events = [{"kind": "oom", "simulated": True},
                      {"kind": "restart", "lost_s": lost_s, "simulated": True}]  # fmt: skip
        start_s = clock_s
        clock_s += lost_s if r.oom else r.time_s
        if not r.oom and (r.iteration + 1) % checkpoint_every == 0:
            clock_s += result.job.checkpoint_write_s
        run.append_step(StepRecord(
            step=r.iteration, rank=0, start_ns=int(start_s * 1e9),
            end_ns=int((start_s + r.time_s) * 1e9), tokens=int(result.tokens_per_iteration),
            scenario=scenario, model_flops=result.model_flops_per_iteration,
            mfu=None if r.oom else r.mfu, peak_memory_bytes=int(r.peak_memory_bytes.max()),
            events=events, simulated=True,
        ))  # fmt: skip
