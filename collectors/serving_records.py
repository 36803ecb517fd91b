"""The records of a serving run's summary (computed in ``collectors.summary``).

Field names are the keys of summary.json (``collectors.summary_json``), so the file reads
the same with plain ``json``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

from moeperf.collectors.accel_records import AcceleratorFigures
from moeperf.collectors.capacity_records import CapacitySummary
from moeperf.collectors.deploy_sweep_records import DeploySweepSummary
from moeperf.collectors.drill_records import DrillSummary
from moeperf.collectors.elastic_records import ElasticSummary
from moeperf.collectors.interference_records import InterferenceSummary
from moeperf.collectors.mtp_ab_records import MtpAbSummary
from moeperf.collectors.quantiles import CI_METHOD, EMPTY, ESTIMATOR, Described
from moeperf.collectors.request_audit import RequestAudit
from moeperf.collectors.saturation_records import Saturation
from moeperf.collectors.soak_records import SoakSummary
from moeperf.collectors.sweep_records import SweepSummary
from moeperf.collectors.target_counters import TargetCounters
from moeperf.collectors.telemetry_records import TelemetrySummary
from moeperf.collectors.workload_records import RepeatLevel, TraceReplay, TurnSummary


@dataclass(frozen=True, slots=True)
class Slo:
    """Service-level objectives for goodput; None means not constrained."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None


NO_SLO = Slo()


@dataclass(frozen=True, slots=True)
class TokenDiscrepancy:
    """Server-reported output tokens against the client's own count, where both exist.

    The client counts by re-tokenizing the streamed text, which need not give the tokens
    the model generated: a model may emit a token sequence its tokenizer would not produce
    for that text (two "\n" tokens re-encode as one "\n\n"), so fewer is expected; more
    means the server's usage undercounts, or chunks were tokenized one by one (/tokenize).
    ``client_fewer`` / ``client_more`` are None in summaries written before they existed.
    """

    compared: int
    differing: int
    mean_client_minus_server: float | None
    client_fewer: int | None = None
    client_more: int | None = None


@dataclass(frozen=True, slots=True)
class LatencySummary:
    """Every latency metric of a scenario, in seconds (``collectors.latency``)."""

    ttft_s: Described
    ttft_from_send_s: Described
    queue_delay_s: Described
    tpot_s: Described
    e2e_s: Described
    itl_s: Described
    icl_s: Described

    def named(self) -> tuple[tuple[str, Described], ...]:
        """(field name, metric) of every metric, in the order of the fields."""
        return (
            ("ttft_s", self.ttft_s),
            ("ttft_from_send_s", self.ttft_from_send_s),
            ("queue_delay_s", self.queue_delay_s),
            ("tpot_s", self.tpot_s),
            ("e2e_s", self.e2e_s),
            ("itl_s", self.itl_s),
            ("icl_s", self.icl_s),
        )

    def labelled(self) -> tuple[tuple[str, Described], ...]:
        """(label, metric) of every metric, in the order tables show them."""
        return (
            ("TTFT", self.ttft_s),
            ("TTFT from send", self.ttft_from_send_s),
            ("client queue delay", self.queue_delay_s),
            ("TPOT", self.tpot_s),
            ("ITL", self.itl_s),
            ("ICL", self.icl_s),
            ("E2E", self.e2e_s),
        )


@dataclass(frozen=True, slots=True)
class SelfWatchSummary:
    """A load worker watching itself during a level (suites/serving/load/selfwatch.py)."""

    loop_lag_p50_s: float
    loop_lag_p99_s: float
    loop_lag_max_s: float
    lag_samples: int
    cpu_fraction: float  # CPU seconds of the worker / wall seconds (1.0 = one core busy)
    wall_s: float


@dataclass(frozen=True, slots=True)
class WorkerSummary:
    """What one load worker did in a level: sent by the worker at its end, stored as is."""

    worker: int
    scenario: str
    offered: int  # open loop: requests scheduled for this worker; closed loop: sent
    sent: int
    late_sends: int
    selfwatch: SelfWatchSummary
    # Where in the level's prompt pool its first prompt was: its ``sent`` prompts were the
    # pool's from there on, cycling. None: it drew none from the pool (a trace's requests
    # each bring their own), or it was written before workers said.
    first_prompt: int | None = None


@dataclass(frozen=True, slots=True)
class MeasurementErrors:
    """The harness's own error (seconds) against the synthetic target's own stamps, split
    by side (docs/concepts/calibration.md). Per matched request:

    - ``send``: server received (its first read of the request's bytes) - the client's
      intended send: the client's queue, encoding, upload and the server's pickup.
    - ``ttft`` (the receive side): first chunk read - its write.
    - ``ttft_total``: the client's TTFT - the server's received-to-first-write, what a
      user's TTFT holds beyond the server's own time; ``send`` + ``ttft`` exactly.
    - ``e2e_receive``: the client's end of the response - the server's; ``e2e_total``:
      the client's E2E - the server's received-to-done.
    - ``itl``: the measured per-token gap - the server's; ``chunk``: every chunk's read -
      its write.

    Summaries written before the send side was counted hold EMPTY for its figures.
    """

    matched_requests: int
    unmatched_requests: int
    ttft: Described
    itl: Described
    chunk: Described
    send: Described = EMPTY
    ttft_total: Described = EMPTY
    e2e_receive: Described = EMPTY
    e2e_total: Described = EMPTY


# How a level ended (suites/serving/load/validity.py judges it): "ok"; "failed", most of
# its measured requests failed for the target's reasons; "invalid", the client may have set
# its numbers (client-bound), or the level was interrupted before it ended.
LevelStatus = Literal["ok", "failed", "invalid"]


@dataclass(frozen=True, slots=True)
class ScenarioSummary:
    """One scenario (load level) of a serving run, its measured requests only.

    The fields from ``level`` on are the runner's: the level's load, its workers' own
    reports, why the client may have set the numbers (empty: it did not), against the
    synthetic target only the harness's measurement error, the level's status with its
    reason (error types first for a failed level), the target's counters and the prompt
    length of a sweep. Summaries written before levels had a status
    read as "ok".
    """

    requests: int
    ok: int
    errors: int
    cancelled: int
    error_types: dict[str, int]
    excluded_warmup: int
    excluded_cooldown: int
    window_s: float
    output_tokens: float
    output_throughput_tok_s: float | None
    request_throughput_rps: float | None
    goodput_rps: float | None
    goodput_ratio: float | None
    slo: Slo
    output_token_discrepancy: TokenDiscrepancy
    latency_s: LatencySummary
    level: float | None = None
    harness: tuple[WorkerSummary, ...] = ()
    client_bottleneck: tuple[str, ...] = ()
    harness_error_s: MeasurementErrors | None = None
    status: LevelStatus = "ok"
    status_reason: str | None = None
    # The target's own counters over the level (collectors.target_counters); None: the
    # run stored no scrape of the target for it (scraping off, or /metrics unreadable).
    target_counters: TargetCounters | None = None
    # A sweep over prompt lengths ([sweep] of the spec): the prompt tokens of every
    # request of this scenario; None: the run swept load levels only.
    input_tokens: int | None = None
    # workload.cache = "fresh": whether the target's prefix cache was reset before the
    # level, and how ("POST /reset_prefix_cache: HTTP 200") or why not; None: not asked.
    cache_reset_done: bool | None = None
    cache_reset: str | None = None
    repeat: int | None = None  # 1-based, with load.repeats > 1
    # The no-reuse control of a prefix workload: the same lengths, no shared prefix.
    unique: bool = False
    turns: tuple[TurnSummary, ...] = ()  # a multi-turn scenario's TTFT by turn index
    trace_replay: TraceReplay | None = None  # a trace level's sends against the trace
    # The accelerators and the target's process over the level's measured window
    # ([telemetry]); None: the sampler was off or read nothing in it (why: the run's telemetry).
    accelerator: AcceleratorFigures | None = None
    # Requests of the level (warm-up and cool-down included) whose prompt another of its
    # requests had sent already: a target with a prefix cache may serve those from it.
    # None: not counted (a trace level, whose requests bring their own prompts, or a
    # summary written before levels counted them).
    repeated_prompts_total: int | None = None
    # An open-loop level's signs of over-saturating its target (collectors.saturation);
    # None: a closed-loop level, too few measured arrivals, or a summary from before.
    saturation: Saturation | None = None


def empty_scenario(slo: Slo = NO_SLO) -> ScenarioSummary:
    """A scenario without a single request record (a level interrupted at its start)."""
    return ScenarioSummary(
        requests=0,
        ok=0,
        errors=0,
        cancelled=0,
        error_types={},
        excluded_warmup=0,
        excluded_cooldown=0,
        window_s=0.0,
        output_tokens=0.0,
        output_throughput_tok_s=None,
        request_throughput_rps=None,
        goodput_rps=None,
        goodput_ratio=None,
        slo=slo,
        output_token_discrepancy=TokenDiscrepancy(0, 0, None),
        latency_s=LatencySummary(EMPTY, EMPTY, EMPTY, EMPTY, EMPTY, EMPTY, EMPTY),
    )


@dataclass(frozen=True, slots=True)
class ServingSummary:
    """The summary of a serving run: every scenario in run order, estimators named."""

    SUITE: ClassVar[str] = "serving"

    percentile_estimator: str = ESTIMATOR
    confidence_interval: str = CI_METHOD
    scenarios: dict[str, ScenarioSummary] = field(default_factory=dict)
    # A capacity run's search (suites/serving/capacity); None for a sweep.
    capacity: CapacitySummary | None = None
    # A run over prompt lengths ([sweep]): the lengths, and those not available.
    sweep: SweepSummary | None = None
    # A prefill-interference run ([interference]): its arms (chunked-prefill sizes).
    interference: InterferenceSummary | None = None
    # Levels run more than once (load.repeats): the spread between their repeats.
    repeats: tuple[RepeatLevel, ...] = ()
    # An MTP A/B run ([mtp_ab]): its blocks, arms' figures, effects and output equality.
    mtp_ab: MtpAbSummary | None = None
    # A deployment sweep ([deploy_sweep]): its arms, Pareto front and recommendation.
    deploy_sweep: DeploySweepSummary | None = None
    # A fault drill ([drill]): each fault's failures and recovery, and the request audit.
    drill: DrillSummary | None = None
    # An elasticity drill ([elastic]): each event's cost and verdict, the replicas' shares.
    elastic: ElasticSummary | None = None
    # Locust engine runs: every request the workers sent is in the records exactly once.
    request_audit: RequestAudit | None = None
    # A soak ([soak]): its windows, slopes with intervals, and verdicts.
    soak: SoakSummary | None = None
    # The accelerator sampler ([telemetry]): its sources' status and its own cost.
    telemetry: TelemetrySummary | None = None

    def accelerator_levels(self) -> dict[str, AcceleratorFigures | None]:
        """Each level's accelerator figures: a scenario's, or an interference arm's levels
        (its mixed level's two scenarios share every second)."""
        if self.interference is not None:
            return self.interference.accelerator_levels()
        return {name: entry.accelerator for name, entry in self.scenarios.items()}
