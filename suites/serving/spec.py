"""The serving suite's spec: a ``ServingSpec`` validated at the edge with pydantic.

A wrong field names itself and the valid choices; every check runs before any load is
sent. Each table's model lives in its own module (target_spec, spec_tables, mode_spec,
and the faults, soak, locust and telemetry specs); this one holds the checks across them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import (
    BaseModel,
    model_validator,
)

from moeperf.suites.serving.elastic.spec import ElasticSpec
from moeperf.suites.serving.faults.spec import DrillSpec
from moeperf.suites.serving.locust_spec import LocustSpec
from moeperf.suites.serving.mode_spec import (
    CapacitySpec,
    DeploySweepSpec,
    InterferenceSpec,
    MtpAbSpec,
    PlanSpec,
    SweepSpec,
)
from moeperf.suites.serving.soak.spec import SoakSpec
from moeperf.suites.serving.spec_tables import (
    ExportSpec,
    GateSpec,
    HarnessSpec,
    LoadSpec,
    SamplingSpec,
    SloSpec,
)
from moeperf.suites.serving.target_spec import TargetSpec
from moeperf.suites.spec_base import STRICT
from moeperf.suites.telemetry_spec import TelemetrySpec
from moeperf.suites.workload_spec import LengthSpec, WorkloadSpec


class _Strict(BaseModel):
    model_config = STRICT


class ServingSpec(_Strict):
    # The suite that runs this spec.
    suite: Literal["serving"] = "serving"
    # The spec's name: in the report's facts, and the suite label of the live and pushed
    # metrics.
    name: str
    # Free text, shown in the report's facts.
    description: str = ""
    # What to drive: an embedded target moeperf starts, or a server at a URL.
    target: TargetSpec = TargetSpec()
    # The sampling fields sent in every request (default: greedy).
    sampling: SamplingSpec = SamplingSpec()
    # What each request sends: prompt and output lengths, prefixes, conversations, a trace.
    workload: WorkloadSpec = WorkloadSpec()
    # The load levels and how each is sent, bounded and measured.
    load: LoadSpec = LoadSpec()
    # The latency objectives a request must meet to count toward goodput.
    slo: SloSpec = SloSpec()
    # Request timeouts, and the limits past which a level's numbers may be the client's.
    harness: HarnessSpec = HarnessSpec()
    # Live Prometheus export of the run, and scraping of the target's own /metrics.
    export: ExportSpec = ExportSpec()
    # The regression gate's settings for runs of this spec.
    gate: GateSpec = GateSpec()
    # Set: an SLO capacity search instead of the sweep of load.levels.
    capacity: CapacitySpec | None = None
    # Set: load.levels at each of several prompt lengths.
    sweep: SweepSpec | None = None
    # Set: prefill interference against the chunked-prefill size (reference target only).
    interference: InterferenceSpec | None = None
    # Set: MTP off against k draft tokens, interleaved A/B blocks.
    mtp_ab: MtpAbSpec | None = None
    # Set: one arm per server configuration of a grid, compared under an SLO.
    deploy_sweep: DeploySweepSpec | None = None
    # Set: the memory planner's KV prediction beside a sweep's measured KV usage.
    plan: PlanSpec | None = None
    # Set: faults injected into the one level, and the requests' recovery from each.
    drill: DrillSpec | None = None
    # Set: replicas behind a router, scaled and killed on a schedule during the one level.
    elastic: ElasticSpec | None = None
    # The Locust engine's layout (load.engine = "locust").
    locust: LocustSpec = LocustSpec()
    # The accelerator sampler beside the levels (suites/telemetry_spec.py).
    telemetry: TelemetrySpec = TelemetrySpec()

    @model_validator(mode="after")
    def _locust_runs_closed_loop(self) -> ServingSpec:
        if self.load.engine != "locust":
            # Set to anything but its defaults (a resolved spec carries the defaults).
            if self.locust != LocustSpec():
                raise ValueError("[locust] is for load.engine = 'locust' (or --engine locust)")
            return self
        if self.load.mode != "concurrency":
            raise ValueError(
                "load.engine = 'locust' runs closed-loop levels (load.mode = 'concurrency'): "
                "Locust starts users, it does not send at set times; open-loop rates and "
                "traces need load.engine = 'asyncio'"
            )
        unsupported = [
            name for name in ("interference", "mtp_ab", "deploy_sweep") if getattr(self, name)
        ]
        if self.workload.conversation is not None:
            unsupported.append("workload.conversation")
        if self.load.ramp_s > 0:  # Locust spawns its users at its own rate
            unsupported.append("load.ramp_s")
        if unsupported:
            raise ValueError(
                "load.engine = 'locust' does not run "
                + ", ".join(f"[{u}]" for u in unsupported)
                + ": use load.engine = 'asyncio'"
            )
        return self

    # Set: the one level is a soak, watched for slow degradation (memory, latency, KV).
    soak: SoakSpec | None = None

    @model_validator(mode="after")
    def _soak_alone(self) -> ServingSpec:
        if self.soak is None:
            return self
        others = [name for name in ("capacity", "sweep", "interference", "mtp_ab", "plan",
                                    "drill", "deploy_sweep")
                  if getattr(self, name) is not None]  # fmt: skip
        load = self.load
        if others or len(load.levels) != 1 or load.repeats != 1 or load.duration_s is None:
            raise ValueError(
                "[soak] watches one load level over its duration: give one load.levels "
                "entry, load.duration_s, no load.repeats, and no "
                + ", ".join(f"[{o}]" for o in others or ["drill"])
            )
        measured_s = load.duration_s - load.warmup_s - load.cooldown_s
        if problems := self.soak.check_level(measured_s):
            raise ValueError("; ".join(problems))
        return self

    @model_validator(mode="after")
    def _elastic_alone(self) -> ServingSpec:
        elastic = self.elastic
        if elastic is None:
            return self
        others = [name for name in ("capacity", "sweep", "interference", "mtp_ab", "plan",
                                    "deploy_sweep", "drill", "soak")
                  if getattr(self, name) is not None]  # fmt: skip
        if others or len(self.load.levels) != 1 or self.load.repeats != 1:
            raise ValueError(
                "[elastic] changes its replicas during one load level: give one load.levels "
                "entry, no load.repeats, and no " + ", ".join(f"[{o}]" for o in others or ["drill"])
            )
        if self.target.kind == "synthetic":
            raise ValueError(
                "[elastic] starts replicas of the reference target (target.kind = 'reference'), "
                "or of a server command (target.kind = 'url' with elastic.command)"
            )
        if self.target.kind == "url" and "{port}" not in elastic.command:
            raise ValueError(
                "[elastic] against a url target starts each replica from elastic.command, "
                "with {port} in it (a free port per replica)"
            )
        if self.target.kind == "reference" and elastic.command:
            raise ValueError(
                "[elastic] on the reference target starts it with [target.reference]'s knobs: "
                "remove elastic.command (it is for target.kind = 'url')"
            )
        last = elastic.events[-1]
        if last.at_s >= self.load.level_limit_s:
            raise ValueError(
                f"the last elastic event ({last.action} at {last.at_s:g} s) comes after the "
                f"level's {self.load.level_limit_s:g} s: raise load.duration_s past it, with "
                "time to recover"
            )
        return self

    @model_validator(mode="after")
    def _drill_alone(self) -> ServingSpec:
        drill = self.drill
        if drill is None:
            return self
        others = [name for name in ("capacity", "sweep", "interference", "mtp_ab", "plan",
                                    "deploy_sweep")
                  if getattr(self, name) is not None]  # fmt: skip
        if others or len(self.load.levels) != 1 or self.load.repeats != 1:
            raise ValueError(
                "[drill] injects its faults into one load level: give one load.levels entry, "
                "no load.repeats, and no " + ", ".join(f"[{o}]" for o in others or ["sweep"])
            )
        if problems := drill.check_target(self.target.kind):
            raise ValueError("; ".join(problems))
        if self.load.engine == "locust" and any(f.kind == "drop_pool" for f in drill.faults):
            raise ValueError("a drop_pool fault needs load.engine = 'asyncio' (its workers)")
        last = drill.faults[-1]
        if last.at_s + last.planned_s >= self.load.level_limit_s:
            raise ValueError(
                f"the last fault ({last.kind} at {last.at_s:g} s) ends after the level's "
                f"{self.load.level_limit_s:g} s: raise load.duration_s past it, with time to "
                "recover"
            )
        return self

    @model_validator(mode="after")
    def _plan_beside_a_sweep(self) -> ServingSpec:
        plan = self.plan
        if plan is None:
            return self
        if self.sweep is None and self.deploy_sweep is None:
            raise ValueError(
                "[plan] draws the planner's KV prediction beside a sweep over prompt "
                "lengths, or checks each arm of a deployment sweep before it starts: it "
                "needs [sweep] or [deploy_sweep] (or use moeperf plan memory)"
            )
        if self.target.kind != "reference" and (
            plan.model is None or (plan.deploy is None and not plan.deployment)
        ):
            raise ValueError(
                "[plan] for a url or synthetic target needs plan.model (its config.json) and "
                "plan.deploy or [plan.deployment]: only the reference target's are known"
            )
        return self

    @model_validator(mode="after")
    def _planted_delay_on_calibration_only(self) -> ServingSpec:
        if self.harness.planted_send_delay_s and (
            self.target.kind != "synthetic" or self.load.engine != "asyncio"
        ):
            raise ValueError(
                "harness.planted_send_delay_s is calibration's self-check: it needs the "
                "synthetic target and load.engine = 'asyncio' (it would add a delay of the "
                "harness's own to any other run's latencies)"
            )
        return self

    @model_validator(mode="after")
    def _goodput_needs_slo(self) -> ServingSpec:
        wants_goodput = self.capacity is not None and self.capacity.min_goodput_ratio is not None
        no_slo = self.slo.ttft_s is None and self.slo.tpot_s is None and self.slo.e2e_s is None
        if wants_goodput and no_slo:
            raise ValueError(
                "capacity.min_goodput_ratio counts requests meeting [slo]: set "
                "slo.ttft_s, slo.tpot_s or slo.e2e_s"
            )
        return self

    @model_validator(mode="after")
    def _workload_fits_the_load(self) -> ServingSpec:
        workload, load = self.workload, self.load
        if (workload.kind == "trace") != (load.mode == "trace"):
            raise ValueError(
                "workload.kind = 'trace' and load.mode = 'trace' go together: a trace is "
                "replayed at its own times (load.levels are speed-ups)"
            )
        if workload.kind == "trace" and (self.capacity or self.sweep or self.interference):
            raise ValueError(
                "a trace replay cannot be combined with [capacity], [sweep] or [interference]"
            )
        if workload.conversation is not None:
            if self.target.api != "chat":
                raise ValueError(
                    "[workload.conversation] sends each turn's history as chat messages: "
                    "set target.api = 'chat'"
                )
            if load.mode != "concurrency":
                raise ValueError(
                    "[workload.conversation] holds one conversation per stream: set "
                    "load.mode = 'concurrency' (load.levels: conversations in parallel)"
                )
        if (workload.conversation or workload.prefix) and (self.sweep or self.interference):
            raise ValueError(
                "[workload.conversation] and [workload.prefix] set the prompts: they cannot "
                "be combined with [sweep] or [interference]"
            )
        if load.repeats > 1 and (self.capacity is not None or self.interference is not None):
            raise ValueError(
                "load.repeats applies to a sweep of levels: a capacity search or an "
                "interference run plans its own levels; remove load.repeats"
            )
        return self

    @model_validator(mode="after")
    def _interference_restarts_the_reference(self) -> ServingSpec:
        if self.interference is None:
            return self
        if self.target.kind != "reference":
            raise ValueError(
                "[interference] restarts the target with each chunked_prefill_size: it "
                "needs target.kind = 'reference'"
            )
        if self.capacity is not None or self.sweep is not None:
            raise ValueError("[interference] cannot be combined with [capacity] or [sweep]")
        if "chunked_prefill_size" in self.target.reference:
            raise ValueError(
                "[interference] sets target.reference.chunked_prefill_size in each arm: "
                "remove it (list the sizes in interference.chunked_prefill_sizes)"
            )
        if self.workload.kind != "random":
            raise ValueError("[interference] needs workload.kind = 'random' (exact lengths)")
        return self

    @model_validator(mode="after")
    def _mtp_ab_arms(self) -> ServingSpec:
        ab = self.mtp_ab
        if ab is None:
            return self
        kind = self.target.kind
        if kind == "synthetic":
            raise ValueError("[mtp_ab] needs target.kind = 'reference' or 'url'")
        if kind == "reference" and (ab.urls or ab.hooks):
            raise ValueError(
                "[mtp_ab] on the reference target starts one target per arm: remove "
                "mtp_ab.urls and mtp_ab.hooks"
            )
        if kind == "reference" and "mtp_tokens" in self.target.reference:
            raise ValueError(
                "[mtp_ab] sets target.reference.mtp_tokens in each arm: remove it (list the "
                "draft counts in mtp_ab.drafts)"
            )
        if kind == "url" and not (ab.urls or ab.hooks):
            raise ValueError(
                "[mtp_ab] against a url target needs mtp_ab.urls (one server per arm) or "
                "mtp_ab.hooks (a command per arm that reconfigures target.url)"
            )
        if self.capacity or self.sweep or self.interference:
            raise ValueError(
                "[mtp_ab] cannot be combined with [capacity], [sweep] or [interference]"
            )
        workload = self.workload
        if workload.kind != "random" or workload.conversation or workload.prefix:
            raise ValueError(
                "[mtp_ab] needs workload.kind = 'random' without [workload.conversation] or "
                "[workload.prefix]: every arm gets the same prompts"
            )
        if self.load.mode != "concurrency" or self.load.repeats != 1:
            raise ValueError(
                "[mtp_ab] runs load.levels as concurrent streams (load.mode = 'concurrency'), "
                "and repeats each arm by itself (mtp_ab.blocks): remove load.repeats"
            )
        return self

    @model_validator(mode="after")
    def _deploy_sweep_arms(self) -> ServingSpec:
        sweep = self.deploy_sweep
        if sweep is None:
            return self
        kind = self.target.kind
        if kind == "synthetic":
            raise ValueError(
                "[deploy_sweep] restarts the target with each arm's knobs: it needs "
                "target.kind = 'reference', or 'url' with deploy_sweep.command"
            )
        if kind == "reference" and (sweep.command or sweep.urls):
            raise ValueError(
                "[deploy_sweep] on the reference target starts it with each arm's knobs: "
                "remove deploy_sweep.command and deploy_sweep.urls (they are for "
                "target.kind = 'url')"
            )
        if kind == "url" and not sweep.urls:
            self._check_command(sweep)
        others = [name for name in ("capacity", "sweep", "interference", "mtp_ab")
                  if getattr(self, name) is not None]  # fmt: skip
        if others:
            raise ValueError(
                "[deploy_sweep] runs load.levels on every arm: it cannot be combined with "
                + ", ".join(f"[{o}]" for o in others)
            )
        if self.load.mode != "concurrency" or self.load.repeats != 1:
            raise ValueError(
                "[deploy_sweep] runs load.levels as concurrent streams (load.mode = "
                "'concurrency') and repeats each arm by itself (deploy_sweep.repeats): "
                "remove load.repeats"
            )
        if self.load.duration_s is None:
            raise ValueError("[deploy_sweep] needs load.duration_s: every level is timed")
        if sweep.plan_fields and self.plan is None:
            raise ValueError(
                "deploy_sweep.plan_fields is for the memory planner's check: add [plan] (the "
                "model's config and the deployment), or remove plan_fields"
            )
        if self.plan is not None and self.plan.deploy is None and not self.plan.deployment:
            raise ValueError(
                "[plan] beside [deploy_sweep] checks each arm's memory before it starts: give "
                "the deployment, with the devices' memory (plan.deploy, a file, or "
                "[plan.deployment])"
            )
        return self

    def _check_command(self, sweep: DeploySweepSpec) -> None:
        from moeperf.suites.serving.command_template import placeholders

        if not sweep.command:
            raise ValueError(
                "[deploy_sweep] against a url target needs deploy_sweep.command: the server "
                "command each arm starts, e.g. 'vllm serve MODEL --port {port} "
                "--max-num-seqs {max_num_seqs}', with target.url = 'http://127.0.0.1:{port}'; "
                "or deploy_sweep.urls, one running server per arm"
            )
        named = placeholders(sweep.command)
        unused = [knob for knob in (*sweep.grid, *sweep.linked) if knob not in named]
        known = {"port", *sweep.grid, *sweep.linked}
        unknown = sorted(n for n in named if n not in known and not n.startswith("env:"))
        problems = []
        if "port" not in named:
            problems.append("it has no {port}: each start listens on a port moeperf picks")
        if unused:
            problems.append(
                "the grid's " + ", ".join(unused) + " appear in it nowhere: every knob is "
                "a placeholder ({" + unused[0] + "}), or the arms would not differ"
            )
        if unknown:
            problems.append(
                ", ".join("{" + n + "}" for n in unknown) + " is not a grid knob, {port} or "
                "{env:NAME}"
            )
        if "{port}" not in self.target.url:
            problems.append(
                "target.url must hold {port} (the URL template of each start, "
                "'http://127.0.0.1:{port}')"
            )
        if problems:
            raise ValueError("deploy_sweep.command: " + "; ".join(problems))

    @model_validator(mode="after")
    def _sweep_sets_the_prompts(self) -> ServingSpec:
        if self.sweep is None:
            return self
        if self.capacity is not None:
            raise ValueError(
                "[sweep] and [capacity] cannot be combined (yet): a capacity search runs at "
                "one prompt length; remove one of them"
            )
        if self.workload.kind != "random":
            raise ValueError(
                "[sweep] needs workload.kind = 'random': it builds prompts of exact lengths"
            )
        if "input_tokens" in self.workload.model_fields_set:
            raise ValueError(
                "[sweep] sets the prompt length of each scenario: remove workload.input_tokens"
            )
        if self.workload.shared_prefix_tokens:
            raise ValueError(
                "[sweep] measures prefill of whole prompts: remove workload.shared_prefix_tokens"
            )
        fit = self.sweep.fit
        if fit is not None and not self.export.scrape_target:
            raise ValueError(
                "[sweep.fit] judges each probe from the target's own counters: set "
                "export.scrape_target = true"
            )
        if fit is not None and self.export.scrape_interval_s > fit.probe_s / 5:
            raise ValueError(
                f"sweep.fit.probe_s ({fit.probe_s:g} s) must hold at least 5 scrapes of the "
                f"target: lower export.scrape_interval_s ({self.export.scrape_interval_s:g} s) "
                "or raise sweep.fit.probe_s"
            )
        if self.sweep.input_tokens.max == "context" and not self.sweep.input_tokens.values:
            output = self.workload.output_tokens
            if output.dist != "fixed" and output.max >= LengthSpec().max:
                raise ValueError(
                    "sweep.input_tokens.max = 'context' leaves room for the output tokens: "
                    "set workload.output_tokens.max (or dist = 'fixed')"
                )
        return self

    @property
    def max_output_tokens(self) -> int:
        """The most output tokens one request of this spec asks for."""
        output = self.workload.output_tokens
        return output.mean if output.dist == "fixed" else output.max
