"""From simulated jobs to the summary's figures: per scenario, the ablation, reproductions.

Computing only: the simulator (targets/cluster_sim) measures nothing and these functions
present nothing; definitions in collectors/simulation_summary.py.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from moeperf.collectors.simulation_summary import AblationRow, Reproduction, SimScenario
from moeperf.suites.simulation.spec import ReproduceSpec
from moeperf.targets.cluster_sim.config import SimConfig
from moeperf.targets.cluster_sim.pipeline import bubble_fraction, interleaved_bubble_fraction
from moeperf.targets.cluster_sim.recipe import Recipe
from moeperf.targets.cluster_sim.simulate import JobResult

# Seed 000's ablation, each step's speedup over its baseline, as the paper reports it.
PAPER_ABLATION = (
    ("operator-level policy", "selective", "1.16x"),
    ("+ runtime adaptation", "adaptive", "1.22x"),
    ("+ dual-batch overlap", "adaptive-dual", "1.38x"),
)
PAPER_OVER_BASELINES = "1.13-1.14x"  # over industrial baselines, OOM restarts included
INDUSTRIAL_BASELINES = ("keep-all", "full-recompute")


def layout_text(cfg: SimConfig) -> str:
    p = cfg.parallel
    text = f"TP{p.tensor} PP{p.pipeline} EP{p.expert} DP{cfg.data_parallel}"
    if p.expert_tensor > 1:
        text += f" ETP{p.expert_tensor}"
    if p.virtual_stages > 1:
        text += f" VP{p.virtual_stages}"
    if p.context > 1:
        text += f" CP{p.context}"
    if p.fsdp:
        text += " FSDP"
    return f"{text}, m={cfg.microbatches}"


def scenario_of(job: str, result: JobResult) -> SimScenario:
    cfg, spec = result.config, result.job
    done = [r for r in result.iterations if not r.oom]
    peaks = np.max([r.peak_memory_bytes for r in result.iterations], axis=0)
    dual = [r.decision_s for r in result.iterations if r.decision_s > 0]
    devices = cfg.cluster.devices
    return SimScenario(
        job=job, policy=spec.policy, skew=spec.skew, devices=devices,
        parameters=cfg.model.parameters(), layout=layout_text(cfg),
        iterations=len(result.iterations), completed=len(done), ooms=result.ooms,
        oom_rate=result.oom_rate,
        step_time_p50_s=float(np.median([r.time_s for r in done])) if done else None,
        mfu_mean=result.mfu_mean if done else None, effective_mfu=result.effective_mfu,
        effective_tokens_per_s_per_device=result.effective_tokens_per_s / devices,
        bubble=float(np.mean([r.idle_fraction for r in done])) if done else None,
        bubble_formula=_bubble_formula(cfg),
        memory_bytes=cfg.cluster.memory_bytes,
        peak_memory_bytes_by_stage=[float(x) for x in peaks],
        recompute_s_mean=float(np.mean([r.recompute_s for r in result.iterations])),
        moved_s_mean=float(np.mean([r.moved_s for r in result.iterations])),
        decision_s_p50=float(np.median(dual)) if dual else None,
        decision_s_max=max(dual) if dual else None,
    )  # fmt: skip


def _bubble_formula(cfg: SimConfig) -> float:
    """(p - 1) / (m + p - 1) for 1F1B; (p - 1) / (v m + p - 1) interleaved."""
    p, v = cfg.parallel.pipeline, cfg.parallel.virtual_stages
    if v == 1:
        return bubble_fraction(p, cfg.microbatches)
    return interleaved_bubble_fraction(p, v, cfg.microbatches)


def _speedup(policy: SimScenario | None, baseline: SimScenario | None) -> float | None:
    if policy is None or baseline is None:
        return None
    base = baseline.effective_tokens_per_s_per_device
    return policy.effective_tokens_per_s_per_device / base if base > 0 else None


def ablation(
    scenarios: dict[str, SimScenario], jobs: Sequence[str], skews: Sequence[str], baseline: str
) -> list[AblationRow]:
    """Per job and skew: each of seed 000's steps as a speedup over ``baseline``, then the
    full method over the better of the industrial baselines (keep-all with its restarts,
    or full recompute), beside the paper's figure."""
    rows = []
    for job in jobs:
        for skew in skews:
            found = {s.policy: s for s in scenarios.values() if s.job == job and s.skew == skew}
            for step, policy, paper in PAPER_ABLATION:
                if policy in found and baseline in found:
                    speedup = _speedup(found[policy], found[baseline])
                    rows.append(AblationRow(job, skew, step, policy, baseline, speedup, paper))
            industrial = [found[b] for b in INDUSTRIAL_BASELINES if b in found]
            if "adaptive-dual" in found and industrial:
                best = max(industrial, key=lambda s: s.effective_tokens_per_s_per_device)
                rows.append(AblationRow(
                    job, skew, "over industrial baselines", "adaptive-dual", best.policy,
                    _speedup(found["adaptive-dual"], best), PAPER_OVER_BASELINES,
                ))  # fmt: skip
    return rows


def published_figure(metric: str, result: JobResult) -> float | None:
    """A simulated job's figure in a published unit (None: no iteration completed)."""
    if not result.completed:
        return None
    cluster = result.config.cluster
    if metric == "tokens/s/GPU":
        return result.effective_tokens_per_s / cluster.devices
    return result.mfu_mean * cluster.peak_flops_per_s / 1e12


def reproduction(spec: ReproduceSpec, result: JobResult) -> Reproduction:
    """The simulator's figure for a published run, in the published unit."""
    cfg = result.config
    simulated = published_figure(spec.metric, result)
    return Reproduction(
        name=spec.name, model=spec.model, cluster=spec.cluster, devices=spec.devices,
        layout=layout_text(cfg), policy=spec.policy, metric=spec.metric,
        published=spec.published, simulated=simulated, source=spec.source, role=spec.role,
        recipe=recipe_text(cfg.recipe),
    )  # fmt: skip


def recipe_text(recipe: Recipe) -> str:
    """The options on, in the order recipe.py documents them ("bf16" when none is)."""
    parts: list[str] = [recipe.precision]
    parts += ["fp8 dispatch"] if recipe.fp8_dispatch else []
    parts += ["deepep"] if recipe.dispatcher == "deepep" else []
    parts += ["a2a overlap"] if recipe.a2a_overlap else []
    parts += ["tp overlap"] if recipe.tp_comm_overlap else []
    parts += [f"dp {recipe.dp_comm}"] if recipe.dp_comm != "hidden" else []
    return ", ".join(parts)
