"""Building the reference target from its config: load the model directory, build the
engine and its loop, warm up, and put the HTTP API (server.build_app) in front."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import FastAPI
from prometheus_client import CollectorRegistry

from moeperf.targets.serving.config import ReferenceTargetConfig
from moeperf.targets.serving.errors import ReferenceConfigError
from moeperf.targets.serving.openai_request import ServedModel
from moeperf.targets.serving.server import build_app

if TYPE_CHECKING:  # imported where used: torch loads only when a target is built
    import torch

    from moeperf.targets.model.tokenizer import ChatTokenizer
    from moeperf.targets.serving.engine.engine import Engine


def create_app(
    config: ReferenceTargetConfig,
    registry: CollectorRegistry | None = None,
    *,
    api_key: str | None = None,
) -> FastAPI:
    """Load the model of ``config``, build its engine, and the API in front of it (which
    wants ``api_key`` on /v1/* if given; not a config field, since configs are stored).

    A model directory that is missing or broken, or knobs the model cannot serve, raise
    ``ReferenceConfigError``.
    """
    # Imported here: torch and the model load only when a target is really built.
    from moeperf.targets.model.checkpoint import ModelDirError, default_model_dir, load_model_dir
    from moeperf.targets.serving.engine.engine import Engine
    from moeperf.targets.serving.engine.loop import EngineLoop

    model_dir = config.model_dir if config.model_dir is not None else default_model_dir()
    try:
        model, tokenizer = load_model_dir(model_dir, _torch_dtype(config.dtype))
    except ModelDirError as exc:
        raise ReferenceConfigError(f"model_dir: {exc}") from None
    if config.max_context_len > model.config.max_position and not config.allow_long_max_model_len:
        raise ReferenceConfigError(
            f"max_context_len: {config.max_context_len} exceeds the model's "
            f"max_position_embeddings ({model.config.max_position}); set "
            "allow_long_max_model_len to serve it anyway (positions past it are "
            "extrapolated: timings and memory are real, outputs are not meaningful)"
        )
    try:
        engine = Engine(
            model,
            config.engine_config(),
            eos_token_ids=tokenizer.stop_token_ids,
            seed=config.seed,
        )
    except ValueError as exc:  # e.g. mtp_tokens for a model without an MTP module
        raise ReferenceConfigError(str(exc)) from None
    _warm_up(Engine(model, config.engine_config(), seed=config.seed))
    served = ServedModel(
        config.served_model_name,
        config.max_context_len,
        tokenizer,
        max_token_chars=_longest_token(tokenizer),
    )
    return build_app(
        EngineLoop(engine),
        served,
        registry,
        wire=config.wire_variant(),
        api_key=api_key,
        limits=config.http_limits(),
    )


def _longest_token(tokenizer: ChatTokenizer) -> int:
    """The longest vocabulary string (added tokens included). A token covers at most that
    many characters of text: byte-level strings have one character per byte, other
    schemes (Metaspace, WordPiece's ##, byte fallback) at least one per character."""
    vocab = tokenizer.tokenizer.get_vocab(with_added_tokens=True)
    return max((len(token) for token in vocab), default=1)


def _warm_up(throwaway: Engine) -> None:
    """A few requests through a throwaway engine on the same model, before serving: the
    first forwards pay torch's one-time setup (about 0.1 s here), which would otherwise
    land on the first client's TTFT. The served engine's counters stay untouched."""
    from moeperf.targets.serving.engine.api import InvalidRequestError, SamplingParams

    params = SamplingParams(max_tokens=8, ignore_eos=True)
    for length in (5, 40, 300):  # one at a time: the waiting queue may hold only one
        try:
            throwaway.generate([list(range(10, 10 + length))], params)
        except InvalidRequestError:  # longer than this configuration allows
            break


def _torch_dtype(name: str) -> torch.dtype:
    import torch

    return {"float32": torch.float32, "bfloat16": torch.bfloat16}[name]
