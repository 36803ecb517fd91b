"""A load worker's next request, whatever the engine: its body from the run's
``WorkerConfig`` and a prompt, its record before it is sent, and the phase of the level
its intended send time falls in. The asyncio and the Locust engines build their requests
here, so both send and record the same thing."""

from __future__ import annotations

from typing import Any

from moeperf.collectors.records import Phase, RequestRecord
from moeperf.suites.serving.load.openai_api import request_body
from moeperf.suites.serving.load.plan import LevelPlan, WorkerConfig
from moeperf.suites.serving.workload.sources import Prompt


def body_of(
    config: WorkerConfig, prompt: Prompt, messages: list[dict[str, str]] | None = None
) -> dict[str, Any]:
    """The JSON body of one streamed request of ``prompt`` (``messages``: a conversation's
    history, chat only)."""
    return request_body(
        config.api,
        config.model,
        prompt.text,
        prompt.output_tokens,
        continuous_usage=config.continuous_usage,
        ignore_eos=config.ignore_eos,
        include_usage=config.include_usage,
        max_tokens_field=config.max_tokens_field,
        min_tokens=config.min_tokens,
        extra=config.extra_body,
        sampling=config.sampling,
        messages=messages,
    )


def phase_of(plan: LevelPlan, intended_abs_ns: int) -> Phase:
    """Warm-up, measured or cool-down: where in the level's window the send was meant."""
    offset_s = (intended_abs_ns - plan.start_ns) / 1e9
    if offset_s < plan.warmup_s:
        return "warmup"
    if offset_s >= plan.duration_s - plan.cooldown_s:
        return "cooldown"
    return "measure"


def new_record(
    request_id: str, plan: LevelPlan, worker: int, intended_abs_ns: int, anchor_ns: int,
    prompt: Prompt,
) -> RequestRecord:  # fmt: skip
    """The record of a request about to be sent (cancelled until it ends otherwise)."""
    return RequestRecord(
        request_id=request_id,
        scenario=plan.scenario,
        phase=phase_of(plan, intended_abs_ns),
        worker=worker,
        intended_send_ns=intended_abs_ns - anchor_ns,
        send_ns=0,
        done_ns=0,
        status="cancelled",
        client_prompt_tokens=prompt.prompt_tokens,
    )
