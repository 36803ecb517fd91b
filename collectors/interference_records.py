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

from dataclasses import dataclass

from moeperf.collectors.accel_records import AcceleratorFigures


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
