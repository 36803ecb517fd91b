"""``[telemetry]``: the accelerator sampler beside a serving or training run, validated at
the edge.

``sources``: what is read every ``period_s`` (collectors.sources.accel_sampler):
- "nvml": this host's GPUs through nvidia-ml-py ("not available" where there is no driver);
- "dcgm": a DCGM exporter's Prometheus page at ``dcgm_url`` (a remote host's GPUs);
- "process": the resident memory and CPU of the target's process tree: an embedded serving
  target (synthetic or reference) that this harness started (not available for a url
  target), or the trainer (the harness's own process and its ranks).
Give each GPU through one source only: nvml and dcgm on the same host count its energy twice.

Defaults, and why: ``sources = ["nvml", "process"]`` reads what this host has without any
setup (either is "not available" with its reason where absent, never an error);
``period_s = 0.1``: 100 ms resolves a load level of a few seconds (AIPerf and vLLM sample
at 0.1-1 s), and a read costs a few milliseconds of the harness's CPU (``tox -e
bench-telemetry``: a process tree 2 ms, a DCGM page of two GPUs 6 ms; 2-4% of a core).
MTP A/B runs sample the GPUs per block (not the arms' processes); interference and
training-dist runs do not run the sampler yet.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from moeperf.suites.spec_base import Strict

TelemetrySourceName = Literal["nvml", "dcgm", "process"]


class TelemetrySpec(Strict):
    # Run the accelerator sampler beside the run; false: no device samples.
    enabled: bool = True
    # What is read: "nvml" (this host's GPUs), "dcgm" (a DCGM exporter at dcgm_url),
    # "process" (the target's or the trainer's process tree). One source per GPU.
    sources: tuple[TelemetrySourceName, ...] = ("nvml", "process")
    # Seconds between reads; the sampler measures its own cost (SamplerCost) at this rate.
    period_s: Annotated[float, Field(ge=0.01, le=60)] = 0.1
    # The exporter's base URL or its /metrics URL; required with "dcgm" in sources.
    dcgm_url: str | None = None

    @model_validator(mode="after")
    def _sources_agree(self) -> TelemetrySpec:
        repeated = sorted({s for s in self.sources if self.sources.count(s) > 1})
        if repeated:
            raise ValueError(f"telemetry.sources lists {', '.join(repeated)} more than once")
        if "dcgm" in self.sources and self.dcgm_url is None:
            raise ValueError(
                "telemetry.sources has 'dcgm': give telemetry.dcgm_url, the exporter's URL "
                "(e.g. http://node1:9400/metrics)"
            )
        if "dcgm" not in self.sources and self.dcgm_url is not None:
            raise ValueError(
                "telemetry.dcgm_url is set but telemetry.sources has no 'dcgm': add it to "
                "sources (valid sources: 'nvml', 'dcgm', 'process') or remove dcgm_url"
            )
        if self.dcgm_url is not None and not self.dcgm_url.startswith(("http://", "https://")):
            raise ValueError(f"telemetry.dcgm_url: {self.dcgm_url!r} is not an http(s):// URL")
        return self
