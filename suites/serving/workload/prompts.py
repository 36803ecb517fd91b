"""The prompt pool of a serving run, built from its workload spec before any load."""

from __future__ import annotations

from collections.abc import Sequence

from suites.errors import UsageError
from suites.serving.load.auth import NO_HEADERS, RequestHeaders
from suites.serving.workload.sources import (
    LengthDist,
    Prompt,
    WorkloadError,
    load_dataset,
    random_prompts,
)
from suites.serving.workload.tokenizer import TokenizerError, resolve_tokenizer
from suites.spec import LengthSpec, ServingSpec


def length_dist(spec: LengthSpec) -> LengthDist:
    return LengthDist(
        kind=spec.dist, mean=spec.mean, spread=spec.spread, min=spec.min, max=spec.max
    )


async def build_prompts(
    spec: ServingSpec, base_url: str, headers: RequestHeaders = NO_HEADERS
) -> list[Prompt]:
    """Prompts with exact token lengths (random) or from a dataset file; a tokenizer of
    the target's /tokenize is sent ``headers``.

    Failures here happen before any load is sent and are the user's to fix (exit 2).
    """
    pools = await build_prompt_pools(spec, base_url, headers, (None,))
    return pools[0]


async def build_prompt_pools(
    spec: ServingSpec,
    base_url: str,
    headers: RequestHeaders,
    input_lengths: Sequence[int | None],
) -> list[list[Prompt]]:
    """One pool of ``workload.num_prompts`` prompts per entry of ``input_lengths``: of
    that exact prompt length (a sweep's), or of the workload's own lengths (None).

    Each length draws from its own seed (the workload's plus the length), so that no
    pool's prompts begin as another's do: a target with prefix caching would serve the
    shared start of a longer prompt from the cache, and its prefill would not be measured.
    """
    workload = spec.workload
    tokenizer = None
    try:
        tokenizer = resolve_tokenizer(workload.tokenizer, base_url, headers=headers)
        if workload.kind == "random":
            if tokenizer is None:
                raise UsageError(
                    "workload.kind = 'random' needs a tokenizer for exact prompt lengths: "
                    "set workload.tokenizer to 'server' (the target's /tokenize) or a local "
                    "Hugging Face tokenizer directory"
                )
            pools = []
            for length in input_lengths:
                input_len = length_dist(workload.input_tokens)
                seed = workload.seed
                if length is not None:
                    input_len, seed = LengthDist.fixed(length), workload.seed + length
                pools.append(
                    await random_prompts(
                        tokenizer,
                        workload.num_prompts,
                        input_len,
                        length_dist(workload.output_tokens),
                        workload.shared_prefix_tokens,
                        seed,
                    )
                )
            return pools
        if input_lengths != (None,):
            raise UsageError("a sweep over prompt lengths needs workload.kind = 'random'")
        dataset = await load_dataset(
            workload.dataset_path,
            workload.num_prompts,
            length_dist(workload.output_tokens),
            workload.seed,
            tokenizer,
        )
        return [dataset.prompts]
    except (TokenizerError, WorkloadError) as exc:
        raise UsageError(f"cannot build the workload: {exc}") from None
    finally:
        if tokenizer is not None:
            await tokenizer.aclose()
