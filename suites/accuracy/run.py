"""Runs an accuracy spec: the target's greedy outputs and logprobs against transformers
on the same weights, and against themselves under load; one run directory.

In order: load the reference (a model directory transformers cannot load is exit 2,
before anything starts), tokenize the prompts with its tokenizer, start or reach the
target, send the first prompt alone (fields it refuses are dropped; no completions API is
exit 2), then store the run and measure: every prompt one at a time, every prompt at
once (``load.concurrency`` in flight at most), the held-out text's prompt logprobs. The
target is stopped before the reference runs, so the two never share the cores. A figure
that fails its threshold ends the run "failed" (exit 1), naming it.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import torch

from moeperf.collectors.accuracy_records import AccuracySummary, Figure, write_prompt_table
from moeperf.collectors.export import metric_names as mn
from moeperf.collectors.sources.counter_window import combine_copies
from moeperf.collectors.sources.target_dialects import TARGET_PREEMPTIONS
from moeperf.collectors.sources.target_metrics import read_exposition
from moeperf.collectors.store import RunStore, RunWriter, interrupts_end_runs
from moeperf.suites.accuracy.judge import Measured, summarize
from moeperf.suites.accuracy.prompts import PromptSet, load_prompt_set
from moeperf.suites.accuracy.reference_side import ReferenceModel
from moeperf.suites.accuracy.spec import AccuracySpec
from moeperf.suites.accuracy.target_side import TargetClient, TargetOutput
from moeperf.suites.errors import UsageError
from moeperf.suites.run_options import RunOptions
from moeperf.suites.serving.embedded import reference as embedded
from moeperf.suites.serving.embedded.process import running_target
from moeperf.suites.serving.load.auth import RequestHeaders, request_headers, without_header_values
from moeperf.suites.serving.preflight import check_target, http_get, served_model
from moeperf.suites.serving.target_spec import reference_config

Say = Callable[[str], None]
_METRICS_TIMEOUT_S = 5.0


def reference_dir(spec: AccuracySpec) -> Path:
    """The model directory transformers loads: the spec's, else the one a reference
    target serves."""
    if spec.reference.model_dir:
        directory = Path(spec.reference.model_dir).expanduser().resolve()
        if not directory.is_dir():
            raise UsageError(f"reference.model_dir: {directory} is not a directory")
        return directory
    return embedded.model_dir(reference_config(spec.target.reference))


def target_config(spec: AccuracySpec) -> dict[str, Any]:
    """The embedded reference target's config: every knob, its model directory resolved,
    and its torch threads by the serving suites' rule unless the spec sets them."""
    config = reference_config(spec.target.reference)
    fields = config.model_dump(mode="json")
    if "threads" not in spec.target.reference:
        fields["threads"] = embedded.host_threads(embedded.usable_cores())
    return {**fields, "model_dir": str(embedded.model_dir(config))}


@contextmanager
def target_url(spec: AccuracySpec) -> Iterator[tuple[str, dict[str, Any]]]:
    """The base URL to drive and the manifest's description of the target."""
    if spec.target.kind == "url":
        yield spec.target.url, {"kind": "url", "url": spec.target.url}
        return
    config = target_config(spec)
    rule = (
        "set by the spec (target.reference.threads)"
        if "threads" in spec.target.reference
        else f"half of the {embedded.usable_cores()} usable cores, at least 1"
    )
    with running_target(embedded.MODULE, config, ready_timeout_s=embedded.READY_TIMEOUT_S) as url:
        yield url, embedded.describe(config, url, rule)


def _counters(url: str, headers: RequestHeaders) -> tuple[float | None, float | None]:
    """The target's preemptions and prefix-cache hits so far (None: not reported)."""
    answer = http_get(url.rstrip("/") + "/metrics", _METRICS_TIMEOUT_S, headers)
    if answer.status != 200:
        return None, None
    try:
        _, samples = read_exposition(answer.body.decode("utf-8", "replace"))
    except ValueError:
        return None, None
    values = combine_copies(samples)
    return (
        values.get((TARGET_PREEMPTIONS.name, ())),
        values.get((mn.TARGET_PREFIX_HITS.name, ())),
    )


def _delta(after: float | None, before: float | None) -> int | None:
    return None if after is None or before is None else int(after - before)


async def _negotiate(client: TargetClient, prompts: PromptSet) -> TargetOutput:
    async with aiohttp.ClientSession() as session:
        return await client.negotiate(session, prompts.prompts[0])


async def _measure(
    client: TargetClient,
    prompts: PromptSet,
    first: TargetOutput,
    concurrency: int,
    url: str,
    say: Say,
) -> tuple[list[TargetOutput], list[TargetOutput], Any, tuple[int | None, int | None]]:
    async with aiohttp.ClientSession() as session:
        say(f"target: {len(prompts.prompts)} prompts, one at a time")
        alone = [first, *await client.one_at_a_time(session, prompts.prompts[1:])]
        before = await asyncio.to_thread(_counters, url, client.headers)
        say(f"target: the same prompts, up to {concurrency} at once")
        loaded = await client.at_once(session, prompts.prompts, concurrency)
        after = await asyncio.to_thread(_counters, url, client.headers)
        say(f"target: the held-out text's prompt logprobs ({len(prompts.heldout_ids)} tokens)")
        heldout = await client.heldout(session, prompts.heldout_ids)
    counters = (_delta(after[0], before[0]), _delta(after[1], before[1]))
    return alone, loaded, heldout, counters


def run_accuracy(
    spec: AccuracySpec,
    spec_given: dict[str, Any],
    store: RunStore,
    options: RunOptions = RunOptions(),  # noqa: B008 (frozen: one shared default is safe)
) -> str:
    """Run ``spec`` into one run; return its id. torch's thread count is restored after.
    It exports nothing live (``options.pushgateway_url`` is not used)."""
    on_started, say = options.on_started, options.say
    threads_before = torch.get_num_threads()
    try:
        return _run(spec, spec_given, store, on_started, say)
    finally:
        torch.set_num_threads(threads_before)


def _run(
    spec: AccuracySpec,
    spec_given: dict[str, Any],
    store: RunStore,
    on_started: Callable[[RunWriter], None],
    say: Say,
) -> str:
    directory = reference_dir(spec)
    threads = spec.reference.threads or embedded.host_threads(embedded.usable_cores())
    say(f"reference: loading {directory} with transformers (float32, CPU, {threads} threads)")
    reference = ReferenceModel(directory, threads)
    prompts = load_prompt_set(spec.prompts, reference.tokenize)
    headers = request_headers(spec.target, os.environ)
    with ExitStack() as stack:
        url, described = stack.enter_context(target_url(spec))
        check = check_target(url, get=functools.partial(http_get, headers=headers))
        model = served_model(spec.target.model, check, url)
        client = TargetClient(url, model, spec, headers)
        first = asyncio.run(_negotiate(client, prompts))
        target_dtype = described.get("config", {}).get("dtype")
        run = store.create(
            "accuracy",
            spec_given=without_header_values(spec_given),
            spec_resolved=without_header_values(spec.model_dump(mode="json")),
            target={**described, "model": model, "headers": headers.described()},
        )
        on_started(run)
        with run, interrupts_end_runs():
            _notes(spec, run, reference, client, target_dtype, prompts)
            alone, loaded, heldout, (preempted, hits) = asyncio.run(
                _measure(client, prompts, first, spec.load.concurrency, url, say)
            )
            stack.close()  # the target stops: the reference runs alone on the cores
            say("reference: teacher-forced on the target's outputs")
            scored = [
                reference.score_output(
                    p.token_ids,
                    out.token_ids,
                    [[t for t, _ in pos.top or ()] for pos in out.positions],
                )
                if out.positions is not None and out.token_ids is not None
                else None
                for p, out in zip(prompts.prompts, alone, strict=True)
            ]
            measured = Measured(
                prompts=prompts,
                alone=alone,
                loaded=loaded,
                concurrency=spec.load.concurrency,
                reference=scored,
                heldout_target=heldout,
                heldout_reference=reference.text_logprobs(prompts.heldout_ids),
                preemptions=preempted,
                prefix_cache_hit_tokens=hits,
            )
            summary = summarize(
                measured,
                spec.thresholds,
                output_tokens=spec.prompts.output_tokens,
                top_k=spec.prompts.top_k,
                reference=reference.describe(),
                target_dtype=target_dtype,
            )
            run.write_summary(summary)
            write_prompt_table(run.directory, summary.prompts)
            _end(run, summary)
    return run.run_id


def _notes(
    spec: AccuracySpec,
    run: RunWriter,
    reference: ReferenceModel,
    client: TargetClient,
    target_dtype: str | None,
    prompts: PromptSet,
) -> None:
    served = f"serving in {target_dtype}" if target_dtype else "its dtype not stated (url target)"
    run.add_note(
        f"Reference: {reference.implementation}, float32 on the CPU ({reference.threads} "
        f"threads), loading {reference.model_dir}. Target: {spec.target.kind}, {served}."
    )
    sent = ", ".join(
        f"{k}={v!r}" for k, v in client.body([]).items() if k not in ("model", "prompt")
    )
    run.add_note(
        f"{len(prompts.prompts)} prompts ({prompts.source}), sent as token ids of the "
        f"reference's tokenizer to /v1/completions, whole: {sent}."
    )
    for refusal in client.refusals:
        run.add_note(f"The target refused a field, left out of every request after: {refusal}.")


def _end(run: RunWriter, summary: AccuracySummary) -> None:
    for figure in summary.figures:
        if figure.status == "not available":
            run.add_note(f"{figure.name}: {figure.reason}.")
    failed = summary.failed
    if failed:
        run.fail(
            "accuracy figures failed: "
            + "; ".join(f"{f.name} {f.value:.4g} (must be {_bound(f)})" for f in failed)
        )


def _bound(figure: Figure) -> str:
    if figure.comparison.startswith("within"):
        return f"within 1/{figure.threshold:g} and {figure.threshold:g}"
    return f"{figure.comparison} {figure.threshold:g}"
