"""Prefill interference against the chunked-prefill size (``[interference]``), as a serving
run's summary holds it.

Each arm is the reference target restarted with one chunked-prefill size; its three
scenarios are in the summary with every number: the decoders alone ("quiet"), the
decoders while long prompts arrive ("decode"), and those long prompts ("prefill").

Accelerator figures ([telemetry]) are per level, not per scenario: the quiet level is its
one scenario, the mixed level ("chunk=N mixed") its two, which share every second, so
neither's energy can be told from the other's; the mixed level's tokens are both's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from moeperf.collectors.accel_records import AcceleratorFigures
from moeperf.collectors.quantiles import Described, QuantileEstimate

if TYPE_CHECKING:  # serving_records holds the summary that holds these records
    from moeperf.collectors.serving_records import ScenarioSummary


@dataclass(frozen=True, slots=True)
class InterferenceArm:
    chunked_prefill_size: int  # 0: each prompt whole in one step
    quiet_scenario: str
    decode_scenario: str
    prefill_scenario: str
    # The accelerators over each level's measured window ([telemetry]; None: off or no
    # sample then): the quiet level's, and the mixed level's (decode and prefill together).
    quiet_accelerator: AcceleratorFigures | None = None
    mixed_accelerator: AcceleratorFigures | None = None

    @property
    def mixed_level(self) -> str:
        """The mixed level's name, as the sampler labels it: "chunk=N mixed"."""
        return f"chunk={self.chunked_prefill_size} mixed"


@dataclass(frozen=True, slots=True)
class InterferenceSummary:
    """The workload every arm ran, and the arms in the order run."""

    decode_streams: int
    decode_input_tokens: int
    decode_output_tokens: int
    prefill_input_tokens: int
    prefill_rate: float  # long prompts per second, open loop (Poisson)
    duration_s: float
    max_num_batched_tokens: int  # every arm's step budget (the same: chunking alone differs)
    arms: tuple[InterferenceArm, ...]

    def accelerator_levels(self) -> dict[str, AcceleratorFigures | None]:
        """Each arm's levels and their accelerator figures, in the order run."""
        levels: dict[str, AcceleratorFigures | None] = {}
        for arm in self.arms:
            levels[arm.quiet_scenario] = arm.quiet_accelerator
            levels[arm.mixed_level] = arm.mixed_accelerator
        return levels


@dataclass(frozen=True, slots=True)
class InterferenceRow:
    """One arm's result: the decoders' ITL alone and with long prompts arriving, and the
    long prompts' TTFT, each a quantile estimate of its scenario (None: no sample)."""

    chunked_prefill_size: int
    quiet_itl_p50_s: QuantileEstimate | None
    mixed_itl_p50_s: QuantileEstimate | None
    quiet_itl_p99_s: QuantileEstimate | None
    mixed_itl_p99_s: QuantileEstimate | None
    prefill_ttft_p50_s: QuantileEstimate | None
    prefill_ttft_p99_s: QuantileEstimate | None


def interference_rows(
    summary: InterferenceSummary, scenarios: Mapping[str, ScenarioSummary]
) -> list[InterferenceRow]:
    """One row per arm, in the order run, from the arms' scenarios of the summary."""
    rows = []
    for arm in summary.arms:
        quiet, decode, prefill = (
            scenarios.get(name)
            for name in (arm.quiet_scenario, arm.decode_scenario, arm.prefill_scenario)
        )

        def at(entry: ScenarioSummary | None, metric: str, q: float) -> QuantileEstimate | None:
            if entry is None:
                return None
            described: Described = getattr(entry.latency_s, metric)
            return described.at(q)

        rows.append(
            InterferenceRow(
                arm.chunked_prefill_size,
                at(quiet, "itl_s", 0.5),
                at(decode, "itl_s", 0.5),
                at(quiet, "itl_s", 0.99),
                at(decode, "itl_s", 0.99),
                at(prefill, "ttft_s", 0.5),
                at(prefill, "ttft_s", 0.99),
            )
        )
    return rows
