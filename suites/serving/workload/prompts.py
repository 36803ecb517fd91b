"""The prompt pools of a serving run, built from its workload spec before any load."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from moeperf.suites.errors import UsageError
from moeperf.suites.serving.load.auth import NO_HEADERS, RequestHeaders
from moeperf.suites.serving.spec import ServingSpec
from moeperf.suites.serving.workload.prefixes import PrefixPlan, prefixed_prompts
from moeperf.suites.serving.workload.sources import (
    LengthDist,
    Prompt,
    WorkloadError,
    load_dataset,
    random_prompts,
)
from moeperf.suites.serving.workload.tokenizer import (
    TargetTokenizer,
    TokenizerError,
    resolve_tokenizer,
)
from moeperf.suites.serving.workload.trace import Trace, read_trace, trace_prompts
from moeperf.suites.spec_files import SPEC_DIR, spec_data_path
from moeperf.suites.workload_spec import LengthSpec


def length_dist(spec: LengthSpec) -> LengthDist:
    return LengthDist(
        kind=spec.dist, mean=spec.mean, spread=spec.spread, min=spec.min, max=spec.max
    )


@dataclass(frozen=True, slots=True)
class PoolKey:
    """What one pool of prompts is for; pools with different keys share no prompt.

    ``draw`` numbers the pools of one kind: with ``workload.cache = "fresh"`` every level
    (and repeat) has its own draw, so that no level is served from the prefix cache the
    level before it filled; with "reuse" they all have draw 0.
    """

    input_tokens: int | None = None  # a sweep's exact prompt length; None: the workload's
    unique: bool = False  # the no-reuse control of [workload.prefix]: no shared prefix
    draw: int = 0


def pool_seed(base: int, key: PoolKey) -> int | str:
    """The seed of one pool's prompts. The first pool of a plain run, and of each sweep
    length, keep the seeds they had before pools had draws (their prompts are unchanged)."""
    if key.draw == 0 and not key.unique:
        return base + (key.input_tokens or 0)
    return f"{base}:{key.input_tokens}:{key.draw}:{'unique' if key.unique else 'shared'}"


def trace_path(path: str) -> Path:
    """Where a spec's trace is (``suites.spec.spec_data_path``)."""
    return spec_data_path(path)


def read_spec_trace(spec: ServingSpec) -> Trace:
    """The trace of a ``kind = "trace"`` workload (exit 2 if it cannot be read)."""
    trace = spec.workload.trace
    assert trace is not None  # the spec's validator requires it for kind "trace"
    path = trace_path(trace.path)
    try:
        return read_trace(path, trace.format, trace.max_requests)
    except WorkloadError as exc:
        looked = ""
        if not path.exists() and not path.is_absolute():
            looked = f" (looked in {Path.cwd()} and in the shipped specs, {SPEC_DIR})"
        raise UsageError(
            f"cannot read the trace: {exc}{looked}; nothing was sent and no run was stored"
        ) from None


async def build_prompts(
    spec: ServingSpec, base_url: str, headers: RequestHeaders = NO_HEADERS
) -> list[Prompt]:
    """Prompts with exact token lengths (random), from a dataset file or for a trace; a
    tokenizer of the target's /tokenize is sent ``headers``.

    Failures here happen before any load is sent and are the user's to fix (exit 2).
    """
    pools = await build_prompt_pools(spec, base_url, headers, (PoolKey(),))
    return pools[0]


async def build_prompt_pools(
    spec: ServingSpec,
    base_url: str,
    headers: RequestHeaders,
    keys: Sequence[PoolKey],
    sizes: Sequence[int] = (),
) -> list[list[Prompt]]:
    """One pool per key: ``sizes`` prompts each (default ``workload.num_prompts``; a
    trace: one per request), of the key's exact prompt length (a sweep's) or of the
    workload's own lengths (None).

    Each key draws from its own seed (``pool_seed``), so that no pool's prompts begin as
    another's do: a target with prefix caching would serve the shared start of a longer
    prompt, or a repeated level, from the cache, and its prefill would not be measured.
    """
    workload = spec.workload
    sizes = sizes or [workload.num_prompts] * len(keys)
    tokenizer = None
    try:
        tokenizer = resolve_tokenizer(workload.tokenizer, base_url, headers=headers)
        if workload.kind == "dataset":
            if any(key != PoolKey() for key in keys):
                raise UsageError(
                    "a sweep over prompt lengths, and workload.cache = 'fresh' with more "
                    "than one level, need workload.kind = 'random' (a dataset has one set "
                    "of prompts): set workload.cache = 'reuse'"
                )
            dataset = await load_dataset(
                workload.dataset_path,
                sizes[0],
                length_dist(workload.output_tokens),
                workload.seed,
                tokenizer,
            )
            return [dataset.prompts]
        if tokenizer is None:
            raise UsageError(
                f"workload.kind = '{workload.kind}' needs a tokenizer for exact prompt "
                "lengths: set workload.tokenizer to 'server' (the target's /tokenize) or a "
                "local Hugging Face tokenizer directory"
            )
        return [
            await _pool(spec, tokenizer, key, size) for key, size in zip(keys, sizes, strict=True)
        ]
    except (TokenizerError, WorkloadError) as exc:
        raise UsageError(f"cannot build the workload: {exc}") from None
    finally:
        if tokenizer is not None:
            await tokenizer.aclose()


async def _pool(
    spec: ServingSpec, tokenizer: TargetTokenizer, key: PoolKey, size: int
) -> list[Prompt]:
    workload = spec.workload
    seed = pool_seed(workload.seed, key)
    if workload.kind == "trace":
        assert workload.trace is not None
        return await trace_prompts(
            tokenizer, read_spec_trace(spec), workload.trace.block_tokens, seed
        )
    input_len = length_dist(workload.input_tokens)
    if key.input_tokens is not None:
        input_len = LengthDist.fixed(key.input_tokens)
    output_len = length_dist(workload.output_tokens)
    prefix = workload.prefix
    if prefix is not None and not key.unique:
        plan = PrefixPlan(prefix.count, prefix.tokens, prefix.zipf_s)
        return await prefixed_prompts(tokenizer, size, input_len, output_len, plan, seed)
    return await random_prompts(
        tokenizer,
        size,
        input_len,
        output_len,
        workload.shared_prefix_tokens,
        seed,
    )
