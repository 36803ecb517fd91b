"""Runs a training-dist spec: every scenario (layout x policy x skew) as a job of several
processes (targets/training/distributed), one run directory, one ``StepRecord`` per rank
per step.

Before the scenarios: the peak FLOP/s of one rank (measured on a CPU with a rank's threads),
and for a ``budget_ratio`` each layout's budget (its highest rank's peak under keep-all and
calm routing, no budget). Each scenario's ranks write their records as they go; the launcher
reads them back as they come and this runner stores them, so a job that dies keeps every
step it finished. The fault drill and any OOM restart the job; their recoveries are kept.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from moeperf.collectors.dist_training_summary import DistOutcome, RecoveryOutcome, summarize_dist
from moeperf.collectors.export.live_export import LiveExporter
from moeperf.collectors.records import StepRecord
from moeperf.collectors.store import RunStore, RunWriter, interrupts_end_runs
from moeperf.suites.errors import SpecError, TargetError
from moeperf.suites.run_options import RunOptions
from moeperf.suites.telemetry import Telemetry
from moeperf.suites.training.dist_export import JobExport
from moeperf.suites.training.dist_spec import DistTrainingSpec, LayoutSpec
from moeperf.suites.training.observe import observed
from moeperf.suites.training.plan import CONFIG_ERRORS
from moeperf.suites.training.runner import measure_peak, peak_summary
from moeperf.suites.training.spec import model_config
from moeperf.suites.training.telemetry import with_dist_figures
from moeperf.targets.training.distributed.launcher import (
    JobResult,
    KillRank,
    LaunchConfigError,
    LaunchError,
    launch,
    prepare_token_stream,
)
from moeperf.targets.training.distributed.rank_step import RankEvent, RankStep
from moeperf.targets.training.distributed.rank_trainer import DistConfig
from moeperf.targets.training.peak import PeakFlops, mfu
from moeperf.targets.training.setup import TrainerConfig

MIB = 2**20
TARGET_NAME = "reference-trainer-distributed"
Say = Callable[[str], None]


def trainer_config(spec: DistTrainingSpec, policy: str, skew: str) -> TrainerConfig:
    t = spec.trainer
    names = {f.name for f in dataclasses.fields(TrainerConfig)}
    fields = {k: v for k, v in t.model_dump(exclude={"model"}).items() if k in names}
    fields.update(
        init_from=t.init_dir,
        checkpoint_dir="",
        model=model_config(t),
        policy=policy,
        skew=skew,
        replay_path=t.replay_path if skew == "replay" else None,
    )
    config = TrainerConfig(**fields)
    try:
        config.validate()
    except CONFIG_ERRORS as exc:
        raise SpecError(f"trainer: {exc}") from None
    return config


def scenario_name(layout_spec: LayoutSpec, policy: str, skew: str) -> str:
    return f"{layout_spec.name}/{policy}/{skew}"


def run_training_dist(
    spec: DistTrainingSpec,
    spec_given: dict[str, Any],
    store: RunStore,
    options: RunOptions = RunOptions(),  # noqa: B008 (frozen: one shared default is safe)
) -> str:
    """Run every scenario of ``spec`` into one run; return the run id."""
    on_started, say, pushgateway_url = options.on_started, options.say, options.pushgateway_url
    configs = {
        (p, s): trainer_config(spec, p, s) for p in spec.matrix.policies for s in spec.matrix.skews
    }
    peak = measure_peak(spec)
    t = spec.trainer
    target = {
        "kind": TARGET_NAME,
        "model": t.init_from,
        "device": t.device,
        "dtype": t.dtype,
        "threads_per_rank": t.threads,
        "backend": "nccl" if t.device == "cuda" else "gloo",
        "model_config": dataclasses.asdict(model_config(t)),
        "peak_flops": dataclasses.asdict(peak_summary(peak)),
    }
    run = store.create(
        "training-dist",
        spec_given=spec_given,
        spec_resolved=spec.model_dump(mode="json"),
        target=target,
    )
    on_started(run)
    run.add_note(
        f"MFU = a step's model FLOPs / (job step time x {peak.flops_per_s / 1e9:.1f} "
        f"GFLOP/s per rank ({peak.source}) x ranks). Ranks are processes on this host, "
        f"gloo over loopback; {t.threads} thread(s) each."
    )
    watch = observed(spec.name, TARGET_NAME, run, spec.export, spec.telemetry, pushgateway_url, say)
    with watch as (exporter, telemetry), run, interrupts_end_runs():
        _run_all(spec, run, configs, peak, say, telemetry, exporter)
    return run.run_id


def _run_all(
    spec: DistTrainingSpec,
    run: RunWriter,
    configs: dict[tuple[str, str], TrainerConfig],
    peak: PeakFlops,
    say: Say,
    telemetry: Telemetry | None,
    exporter: LiveExporter | None,
) -> None:
    root = run.directory / "dist"
    tokens = prepare_token_stream(
        DistConfig(
            next(iter(configs.values())),
            spec.matrix.layouts[0].layout(),
            str(root),
        )
    ).trainer.token_stream_path
    outcomes: list[DistOutcome] = []
    link: list[tuple[int, float]] = []
    try:
        for layout_spec in spec.matrix.layouts:
            budget = _budget(spec, layout_spec, configs, root, tokens, say)
            for (policy, skew), config in configs.items():
                config = dataclasses.replace(config, budget_bytes=budget, token_stream_path=tokens)
                if telemetry is not None:
                    telemetry.level_started(scenario_name(layout_spec, policy, skew))
                try:
                    outcome = _scenario(
                        spec, run, layout_spec, policy, skew, config, peak, link, say, exporter
                    )
                finally:
                    if telemetry is not None:
                        telemetry.level_ended()
                outcomes.append(outcome)
    finally:
        for outcome in outcomes:
            if outcome.stopped:
                run.add_note(f"Scenario {outcome.name} {outcome.stopped}")
        shutil.rmtree(root / "checkpoints", ignore_errors=True)
        if outcomes:
            summary = summarize_dist(
                outcomes,
                peak_summary(peak),
                min(link, key=lambda x: x[1] / x[0]) if link else None,
            )
            if telemetry is not None:
                telemetry.finish()
                summary = with_dist_figures(telemetry, summary, outcomes)
            run.write_summary(summary)


def _budget(
    spec: DistTrainingSpec,
    layout_spec: LayoutSpec,
    configs: dict[tuple[str, str], TrainerConfig],
    root: Path,
    tokens: str | None,
    say: Say,
) -> int | None:
    """The per-rank budget: the spec's bytes, or ratio x this layout's highest rank peak
    under keep-all and calm routing with no budget."""
    t = spec.trainer
    if t.budget_ratio is None:
        return t.budget_bytes
    base = next(iter(configs.values()))
    config = dataclasses.replace(
        base,
        policy="keep-all",
        skew="calm",
        replay_path=None,
        budget_bytes=None,
        steps=t.budget_calibration_steps,
        checkpoint_every=t.budget_calibration_steps + 1,
        token_stream_path=tokens,
    )
    out = root / f"budget-{layout_spec.name}"
    try:
        result = launch(DistConfig(config, layout_spec.layout(), str(out)), max_restarts=0)
    except LaunchConfigError as exc:
        raise SpecError(f"matrix.layouts {layout_spec.name!r}: {exc}") from None
    except LaunchError as exc:
        raise TargetError(f"budget calibration of {layout_spec.name!r}: {exc}") from None
    finally:
        shutil.rmtree(out / "checkpoints", ignore_errors=True)
    peak_bytes = max(s.peak_memory_bytes for s in result.steps)
    budget = int(t.budget_ratio * peak_bytes)
    say(
        f"{layout_spec.name}: budget {budget / MIB:.1f} MiB per rank "
        f"({t.budget_ratio:g} x the highest rank's keep-all/calm peak {peak_bytes / MIB:.1f} MiB)"
    )
    return budget


def _scenario(
    spec: DistTrainingSpec,
    run: RunWriter,
    layout_spec: LayoutSpec,
    policy: str,
    skew: str,
    config: TrainerConfig,
    peak: PeakFlops,
    link: list[tuple[int, float]],
    say: Say,
    exporter: LiveExporter | None,
) -> DistOutcome:
    layout = layout_spec.layout()
    name = scenario_name(layout_spec, policy, skew)
    outcome = DistOutcome(
        name,
        layout_spec.name,
        layout.ep,
        layout.pp,
        layout.dp,
        policy,
        skew,
        config.microbatches,
        config.budget_bytes,
    )
    anchor_ns = run.manifest.anchor_monotonic_ns
    fault = None
    if spec.faults is not None and layout_spec in spec.drilled():
        f = spec.faults
        fault = KillRank(f.kill_rank, f.after_step, f.delay_s)

    live = None
    if exporter is not None:
        live = JobExport(exporter, name, layout.world_size, layout.pp, peak.flops_per_s)

    def keep(record: RankStep | RankEvent) -> None:
        if isinstance(record, RankStep):
            step = _step_record(record, name, anchor_ns, peak)
            outcome.records.append(step)
            run.append_step(step)
            if live is not None:
                live.step(step)
            return
        if record.kind == "link":
            link.append((int(record.detail["bytes"]), float(record.detail["one_way_s"])))
        if live is not None:
            live.event(record)

    say(
        f"{name}: {layout.world_size} ranks"
        + (f", SIGKILL rank {fault.rank} after step {fault.after_step}" if fault else "")
    )
    out = run.directory / "dist" / name.replace("/", "_")
    result: JobResult | None = None
    try:
        result = launch(
            DistConfig(config, layout, str(out)),
            fault=fault,
            max_restarts=config.max_restarts,
            on_record=keep,
        )
    except LaunchConfigError as exc:
        raise SpecError(f"scenario {name}: {exc}") from None
    except LaunchError as exc:
        raise TargetError(f"scenario {name}: the job failed: {exc}") from None
    finally:
        shutil.rmtree(out / "checkpoints", ignore_errors=True)
    outcome.attempts = result.attempts
    outcome.stopped = result.stopped or None
    outcome.recoveries = [
        RecoveryOutcome(
            cause=r.cause,
            rank=r.rank,
            attempt=r.attempt,
            step=r.step,
            restored_step=r.restored_step,
            steps_replayed=r.steps_replayed,
            detect_s=r.detect_s,
            resume_s=r.resume_s,
            message=r.message,
        )
        for r in result.recoveries
    ]
    for r in outcome.recoveries:
        resumed = (
            f"resumed from step {r.restored_step} in {r.resume_s:.2f} s"
            if r.resume_s is not None
            else "no step completed after it"
        )
        say(f"{name}: {r.cause} rank {r.rank} at step {r.step}: detected in "
            f"{r.detect_s * 1e3:.0f} ms, {resumed}")  # fmt: skip
    return outcome


def _step_record(step: RankStep, scenario: str, anchor_ns: int, peak: PeakFlops) -> StepRecord:
    step_time_s = (step.end_ns - step.start_ns) / 1e9
    return StepRecord(
        step=step.step,
        rank=step.rank,
        start_ns=step.start_ns - anchor_ns,
        end_ns=step.end_ns - anchor_ns,
        tokens=step.tokens,
        scenario=scenario,
        loss=step.loss,
        model_flops=step.model_flops,
        mfu=mfu(step.model_flops, step_time_s, peak) if step_time_s > 0 else None,
        peak_memory_bytes=step.peak_memory_bytes,
        tokens_per_expert=step.tokens_per_expert,
        policy_decisions=step.policy_decisions,
        events=list(step.events),
        stage=step.stage,
        attempt=step.attempt,
        compute_s=step.compute_s,
        all_to_all_s=step.all_to_all_s,
        pipeline_s=step.pipeline_s,
        all_reduce_s=step.all_reduce_s,
        wait_s=step.wait_s,
        microbatch_s=step.microbatch_s,
        all_to_all_bytes=step.all_to_all_bytes,
        pipeline_bytes=step.pipeline_bytes,
        all_reduce_bytes=step.all_reduce_bytes,
        layers=step.layers,
        tokens_per_local_expert=step.tokens_per_local_expert,
        dispatched_tokens=step.dispatched_tokens,
        received_tokens=step.received_tokens,
    )
