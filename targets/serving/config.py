"""What a user sets for the reference serving target, validated once at the edge.

``ReferenceTargetConfig`` is the JSON object of ``--config`` (and of an embedded target in a
suite spec): which model to serve under which name, and every engine knob. Errors name the
field and what it accepts; ``engine_config()`` hands the knobs to the engine as its own
frozen record, and ``wire_variant()`` hands the server the four switches of how its
stream differs from vLLM's (``targets.openai_wire.WireVariant``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from moeperf.targets.openai_wire import UsageMode, WireVariant
from moeperf.targets.serving.engine.api import EngineConfig
from moeperf.targets.serving.errors import ReferenceConfigError
from moeperf.targets.serving.http_limits import HttpLimits

_DEFAULTS = EngineConfig()
_HTTP = HttpLimits()
# The model directories shipped in targets/model/, by name: the Mixtral-style default and
# the hybrid (Qwen3-Next) one. Found by path: importing targets.model would import torch.
SHIPPED_MODELS = ("default", "hybrid")
SHIPPED_MODEL_ROOT = Path(__file__).resolve().parents[1] / "model"


def shipped_model_dir(given: Path) -> Path:
    """``given``, or the shipped model of that name when ``given`` is a bare name such as
    "hybrid" that names no directory here."""
    if str(given) in SHIPPED_MODELS and not given.exists():
        return SHIPPED_MODEL_ROOT / str(given)
    return given


_WIRE = WireVariant()


class ReferenceTargetConfig(BaseModel):
    """The reference serving target: model, served name, engine knobs, sampling seed, and
    how its stream differs from vLLM's.

    Engine knobs keep vLLM's names (see ``EngineConfig`` for their meaning); their
    defaults are the engine's own, so this class never disagrees with it. The wire
    switches (``send_done``, ``usage``, ``role_chunk``, ``reject_unknown_fields``) default
    to vLLM's behaviour; ``WireVariant`` says what each changes.
    """

    # Strict: "16" is not a block size, nor true a thread count.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    # The engine knobs' comments are EngineConfig's (docs/reference/spec-fields.md).
    documented_by: ClassVar[tuple[type, ...]] = (EngineConfig,)

    # The model directory (weights, tokenizer, config), or the name of a shipped one
    # (default, hybrid); unset: the default;
    model_dir: Path | None = Field(
        None,
        strict=False,  # a path is given as a string
        description="model directory (weights, tokenizer, config), or the name of a shipped "
        f"one ({', '.join(SHIPPED_MODELS)}); None: the default",
    )
    # The model name the API answers to (listed at /v1/models).
    served_model_name: str = Field("moeperf-tiny-moe", min_length=1)
    max_running_requests: int = Field(_DEFAULTS.max_running_requests, ge=1)
    max_waiting_requests: int = Field(_DEFAULTS.max_waiting_requests, ge=0)
    num_kv_blocks: int = Field(_DEFAULTS.num_kv_blocks, ge=1)
    block_size: int = Field(_DEFAULTS.block_size, ge=1)
    max_num_batched_tokens: int = Field(_DEFAULTS.max_num_batched_tokens, ge=1)
    chunked_prefill_size: int = Field(_DEFAULTS.chunked_prefill_size, ge=0)
    enable_prefix_caching: bool = _DEFAULTS.enable_prefix_caching
    mtp_tokens: int = Field(_DEFAULTS.mtp_tokens, ge=0)
    max_context_len: int = Field(_DEFAULTS.max_context_len, ge=1)
    # vLLM's VLLM_ALLOW_LONG_MAX_MODEL_LEN: RoPE computes any position, so the engine runs
    # past the trained length; its timings and memory are real, its text there is not.
    allow_long_max_model_len: bool = Field(
        False,
        description="max_context_len may exceed the model's max_position_embeddings "
        "(positions past it are extrapolated: timings and memory real, outputs not)",
    )
    dtype: Literal["float32", "bfloat16"] = _DEFAULTS.dtype
    # Torch intra-op threads; 0 leaves torch's default. Left out of a spec's
    # [target.reference], moeperf run sets half the usable cores, at least 1.
    threads: int = Field(_DEFAULTS.threads, ge=0)
    # Torch's global seed, for sampled requests that send no seed.
    seed: int = Field(0, ge=0, description="torch's global seed, for unseeded sampled requests")
    # A broken MTP verifier for tests of the harness: every draft accepted unchecked
    # (outputs are wrong); never on in a benchmark.
    unsafe_accept_all_drafts: bool = Field(
        False,
        description="a broken MTP verifier for tests of the harness: every draft accepted "
        "unchecked (outputs are wrong); never on in a benchmark",
    )
    # End each stream with data: [DONE]; false: the stream ends with its finish_reason chunk.
    send_done: bool = Field(_WIRE.send_done, description="end streams with data: [DONE]")
    # "as_requested": usage as stream_options asks; "end_only": on the finish_reason
    # chunk only; "never": no usage at all.
    usage: UsageMode = Field(_WIRE.usage, description="as_requested, end_only or never")
    # Chat streams start with a role-only chunk; false: the first chunk carries a token.
    role_chunk: bool = Field(_WIRE.role_chunk, description="chat: a role-only first chunk")
    # Refuse with HTTP 422 a request with a field OpenAI does not document (ignore_eos,
    # min_tokens, top_k, ...).
    reject_unknown_fields: bool = Field(
        _WIRE.reject_unknown_fields, description="HTTP 422 for fields OpenAI does not document"
    )
    # What one client may cost the server (targets/serving/http_limits.py): uvicorn bounds
    # neither a body's size nor how slowly it arrives nor how long a write waits for a
    # client that does not read. max_body_bytes: the largest request body accepted; HTTP
    # 413 above it.
    max_body_bytes: int = Field(
        _HTTP.max_body_bytes,
        ge=1,
        description="largest request body accepted; HTTP 413 above it (16 MiB: a full "
        "context of the shipped models is well under 1 MiB as text or token ids)",
    )
    # The whole request body must arrive within this time of its headers; HTTP 408 after.
    body_read_timeout_s: float = Field(
        _HTTP.body_read_timeout_s,
        gt=0,
        allow_inf_nan=False,
        description="the whole request body must arrive within this time of its headers; "
        "HTTP 408 after it",
    )
    # A response write blocked this long (the client stopped reading) aborts the
    # connection, and a stream's engine request with it.
    write_timeout_s: float = Field(
        _HTTP.write_timeout_s,
        gt=0,
        allow_inf_nan=False,
        description="a response write blocked this long (the client stopped reading) "
        "aborts the connection, and a stream's engine request with it",
    )

    @model_validator(mode="after")
    def _shipped_name(self) -> ReferenceTargetConfig:
        if self.model_dir is not None:  # frozen: set through object's own setter
            object.__setattr__(self, "model_dir", shipped_model_dir(self.model_dir))
        return self

    @model_validator(mode="after")
    def _engine_accepts(self) -> ReferenceTargetConfig:
        # The cross-field rules (e.g. the token budget must cover a decode step of every
        # running request) live in EngineConfig; checking here reports them at the edge.
        self.engine_config()
        return self

    def engine_config(self) -> EngineConfig:
        """The engine's knobs as the engine's own record."""
        return EngineConfig(
            max_running_requests=self.max_running_requests,
            max_waiting_requests=self.max_waiting_requests,
            num_kv_blocks=self.num_kv_blocks,
            block_size=self.block_size,
            max_num_batched_tokens=self.max_num_batched_tokens,
            chunked_prefill_size=self.chunked_prefill_size,
            enable_prefix_caching=self.enable_prefix_caching,
            mtp_tokens=self.mtp_tokens,
            max_context_len=self.max_context_len,
            dtype=self.dtype,
            threads=self.threads,
            unsafe_accept_all_drafts=self.unsafe_accept_all_drafts,
        )

    def wire_variant(self) -> WireVariant:
        """How the server's stream differs from vLLM's, as the server's own record."""
        return WireVariant.of(self)

    def http_limits(self) -> HttpLimits:
        """What one client may cost the server, as the server's own record."""
        return HttpLimits(self.max_body_bytes, self.body_read_timeout_s, self.write_timeout_s)

    @classmethod
    def from_fields(cls, fields: dict[str, Any]) -> ReferenceTargetConfig:
        """Validate ``fields``; a ``ReferenceConfigError`` names every bad field."""
        try:
            return cls.model_validate(fields)
        except ValidationError as exc:
            raise ReferenceConfigError(_describe(exc)) from None

    @classmethod
    def from_json(cls, text: str) -> ReferenceTargetConfig:
        """Validate a JSON object of fields (what ``--config`` takes)."""
        try:
            fields = json.loads(text)
        except ValueError as exc:
            raise ReferenceConfigError(f"config is not valid JSON: {exc}") from None
        if not isinstance(fields, dict):
            raise ReferenceConfigError("config must be a JSON object of fields")
        return cls.from_fields(fields)


def _describe(exc: ValidationError) -> str:
    problems = []
    for error in exc.errors():
        field = ".".join(str(part) for part in error["loc"]) or "config"
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            valid = ", ".join(ReferenceTargetConfig.model_fields)
            message = f"unknown field; valid fields: {valid}"
        problems.append(f"{field}: {message}" if error["loc"] else message)
    return "; ".join(problems)
