"""What the engine refuses before queueing a request, with a message saying what is valid."""

from __future__ import annotations

from moeperf.targets.serving.engine.api import EngineConfig, InvalidRequestError, SamplingParams

# vLLM's _SAMPLING_EPS: a temperature below it is greedy at the API (openai_request.py).
MIN_TEMPERATURE = 1e-5


def validate_request(
    cfg: EngineConfig, vocab: int, prompt: list[int], params: SamplingParams
) -> None:
    if not prompt:
        raise InvalidRequestError("the prompt is empty; give at least one token")
    if min(prompt) < 0 or max(prompt) >= vocab:
        raise InvalidRequestError(f"prompt token ids must be in [0, {vocab})")
    if params.max_tokens < 1:
        raise InvalidRequestError(f"max_tokens must be >= 1, got {params.max_tokens}")
    if len(prompt) + params.max_tokens > cfg.max_context_len:
        raise InvalidRequestError(
            f"the prompt ({len(prompt)} tokens) plus max_tokens ({params.max_tokens}) "
            f"exceeds the context limit of {cfg.max_context_len} tokens"
        )
    if cfg.chunked_prefill_size == 0 and len(prompt) > cfg.max_num_batched_tokens:
        raise InvalidRequestError(
            f"the prompt ({len(prompt)} tokens) exceeds max_num_batched_tokens "
            f"({cfg.max_num_batched_tokens}) and chunked prefill is off"
        )
    needed = (len(prompt) + params.max_tokens + 2 * cfg.mtp_tokens) // cfg.block_size + 1
    if needed > cfg.num_kv_blocks:
        raise InvalidRequestError(
            f"the request needs {needed} KV blocks; the cache has {cfg.num_kv_blocks}"
        )
    if params.temperature < 0 or not 0 < params.top_p <= 1:
        raise InvalidRequestError("temperature must be >= 0 and top_p in (0, 1]")
    if 0 < params.temperature < MIN_TEMPERATURE:
        # logits / temperature overflows to inf and the draw is NaN.
        raise InvalidRequestError(
            f"temperature must be 0 (greedy) or >= {MIN_TEMPERATURE:g}, got {params.temperature!r}"
        )
    if params.logprobs is not None and not 0 <= params.logprobs <= 20:
        raise InvalidRequestError("logprobs must be between 0 and 20")
    if params.prompt_logprobs is not None and not 0 <= params.prompt_logprobs <= 20:
        raise InvalidRequestError("prompt_logprobs must be between 0 and 20")
