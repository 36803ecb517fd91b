"""``[target]``: what a serving spec drives (a URL, the synthetic or the reference target),
and the headers it sends.

Each target's own config validates its table: ``[target.synthetic]`` is
``moeperf.targets.synthetic.config.SyntheticConfig`` and ``[target.reference]`` is
``moeperf.targets.serving.config.ReferenceTargetConfig``. targets import nothing of ours, so
their errors are translated here into a ``SpecError`` naming the field (exit 2).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    Field,
    PlainSerializer,
    PlainValidator,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from moeperf.collectors.request_settings import SAMPLING_FIELDS
from moeperf.suites.errors import SpecError
from moeperf.suites.serving.load.openai_api import MaxTokensField
from moeperf.suites.spec_base import STRICT
from moeperf.suites.spec_errors import NO_ECHO, problems_of, spec_error, unknown_field
from moeperf.targets.synthetic.config import SyntheticConfig

if TYPE_CHECKING:
    from moeperf.targets.serving.config import ReferenceTargetConfig
from moeperf.suites import reference_install
from moeperf.suites.reference_install import REFERENCE_INSTALL


class _Strict(BaseModel):
    model_config = STRICT


def _synthetic_config(value: Any) -> SyntheticConfig:
    # The target's own checks; its SyntheticConfigError is a ValueError, which pydantic
    # reports with the error attached, and suites.spec_errors names the field from it.
    if isinstance(value, SyntheticConfig):
        return value
    return SyntheticConfig.from_dict(value)


# An environment variable's name as a shell exports it; an HTTP header's name (RFC 9110
# token). The harness frames its requests itself, so it sends none of _FRAMING_HEADERS.
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_FRAMING_HEADERS = frozenset({"content-length", "transfer-encoding", "connection", "host"})


def _env_name(name: str, key: str) -> str:
    if not _ENV_NAME.fullmatch(name):
        # Not repeated in the error: what was written may be the secret itself.
        raise PydanticCustomError(
            NO_ECHO,
            f"{key} must be the name of an environment variable (letters, digits and _, "
            "not starting with a digit), not its value",
        )
    return name


class HeaderFromEnv(_Strict):
    """A header whose value is read from an environment variable when a run starts:
    ``{ env = "NAME" }``. The value is never stored (docs/tutorials/own-server.md)."""

    env: str

    @field_validator("env")
    @classmethod
    def _is_a_name(cls, value: str) -> str:
        return _env_name(value, "env")


def _header_value(value: Any) -> str | HeaderFromEnv:
    # One validator for both forms, so that a wrong one gets one error naming both, and
    # none that repeats the value (pydantic's union would show it, once per form).
    if isinstance(value, HeaderFromEnv):
        return value
    if isinstance(value, str):
        if any(c in value for c in "\r\n\0"):
            raise PydanticCustomError(NO_ECHO, "a header value cannot hold a line break or NUL")
        return value
    if isinstance(value, Mapping) and set(value) == {"env"} and isinstance(value["env"], str):
        return HeaderFromEnv(env=_env_name(value["env"], "env"))
    raise PydanticCustomError(
        NO_ECHO, 'a header value is a string, or { env = "NAME" } to read it from the environment'
    )


HeaderValue = Annotated[str | HeaderFromEnv, BeforeValidator(_header_value)]


class TargetSpec(_Strict):
    """What to drive: an embedded target moeperf starts (synthetic, reference), or a URL."""

    # "synthetic" or "reference": an embedded target that moeperf starts and stops
    # ([target.synthetic], [target.reference]); "url": a running OpenAI-compatible server.
    kind: Literal["synthetic", "url", "reference"] = "synthetic"
    # kind = "url": the server's base URL (http:// or https://); /v1/... paths are added to it.
    url: str = ""
    # Which endpoint each request goes to: /v1/chat/completions or /v1/completions.
    api: Literal["chat", "completions"] = "completions"
    # The model named in every request; "": the first model the target lists at /v1/models.
    model: str = ""
    # The embedded ground-truth server's latencies and faults, validated by the target.
    synthetic: Annotated[
        SyntheticConfig,
        PlainValidator(_synthetic_config),
        PlainSerializer(SyntheticConfig.to_dict),
    ] = SyntheticConfig()
    # The reference serving engine's knobs (targets.serving.config.ReferenceTargetConfig).
    # Checked by reference_config() only when kind = "reference", so that a harness-only
    # install (no torch) still loads every other spec.
    reference: dict[str, Any] = {}
    # The free-form table above is checked by this class when kind = "reference"
    # (docs/reference/spec-fields.md lists its fields from it).
    documented_tables: ClassVar[dict[str, str]] = {
        "reference": "moeperf.targets.serving.config:ReferenceTargetConfig"
    }
    # Ask for vLLM's per-chunk usage (exact tokens per chunk). Turn off for servers that
    # reject unknown stream_options.
    continuous_usage: bool = True
    # Ask for usage at all (stream_options.include_usage). False sends no stream_options,
    # for servers that reject the field; output tokens then come from the tokenizer.
    include_usage: bool = True
    # Send ignore_eos (vLLM, SGLang) so each request generates exactly its max tokens and
    # output lengths are the workload's. Turn off for servers that reject the field.
    ignore_eos: bool = True
    # The name the target takes the output cap under (OpenAI's newer name, or the old one).
    max_tokens_field: MaxTokensField = "max_tokens"
    # vLLM / SGLang: generate at least this many tokens (None: not sent).
    min_tokens: Annotated[int, Field(ge=0)] | None = None
    # Fields merged last into every request body. n other than 1 is refused (one choice per
    # request is measured); sampling fields are refused here: they go in [sampling].
    extra_body: dict[str, Any] = {}
    # kind = "url": probe the target before the run (moeperf probe's requests) and send no
    # field it refuses. False: send the spec's fields as written, unprobed.
    probe: bool = True
    # The name of an environment variable whose value is sent as "Authorization: Bearer
    # <value>" with every request to the target (vLLM's --api-key); "" sends none.
    api_key_env: str = ""
    # Sent with every request to the target: a fixed value, or { env = "NAME" } read from
    # the environment when the run starts. No value is stored (suites/serving/load/auth.py).
    headers: dict[str, HeaderValue] = {}

    @field_validator("api_key_env")
    @classmethod
    def _key_env_is_a_name(cls, value: str) -> str:
        return _env_name(value, "target.api_key_env") if value else value

    @field_validator("headers")
    @classmethod
    def _header_names(cls, value: dict[str, str | HeaderFromEnv]) -> dict[str, str | HeaderFromEnv]:
        seen: set[str] = set()
        for name in value:
            if not _HEADER_NAME.fullmatch(name):
                raise PydanticCustomError(
                    NO_ECHO, f"{name!r} is not a header name (letters, digits and !#$%&'*+.^_`|~-)"
                )
            if name.lower() in _FRAMING_HEADERS:
                raise PydanticCustomError(
                    NO_ECHO,
                    f"{name!r}: the harness sets this header itself; valid: any header but "
                    f"{', '.join(sorted(_FRAMING_HEADERS))}",
                )
            if name.lower() in seen:
                raise PydanticCustomError(
                    NO_ECHO, f"{name!r} is given twice (header names ignore case)"
                )
            seen.add(name.lower())
        return value

    @field_validator("extra_body")
    @classmethod
    def _one_choice(cls, value: dict[str, Any]) -> dict[str, Any]:
        # Every timestamp and token count is of choices[0]: other choices would be
        # generated, load the target, and go unmeasured.
        n = value.get("n", 1)
        if n != 1:
            raise ValueError(
                f"n = {n!r}: the harness measures one choice per request (its timestamps "
                "and token counts are of choices[0]); remove n or set it to 1"
            )
        return value

    @field_validator("extra_body")
    @classmethod
    def _sampling_elsewhere(cls, value: dict[str, Any]) -> dict[str, Any]:
        # One place for sampling: [sampling] is what the manifest records as sent, and
        # what compare and the gate check.
        for name in SAMPLING_FIELDS:
            if name in value:
                raise ValueError(
                    f"{name} is a sampling setting: set sampling.{name} (the [sampling] "
                    f"section) instead, and remove {name} from target.extra_body"
                )
        return value

    @model_validator(mode="after")
    def _url_needed(self) -> TargetSpec:
        if self.kind == "url" and not self.url.startswith(("http://", "https://")):
            raise ValueError("target.url must be an http:// or https:// URL when kind = 'url'")
        return self

    @model_validator(mode="after")
    def _one_authorization(self) -> TargetSpec:
        if self.api_key_env and any(n.lower() == "authorization" for n in self.headers):
            raise PydanticCustomError(
                NO_ECHO,
                "target.api_key_env sends the Authorization header, and target.headers sets "
                "one too: keep one of them",
            )
        return self


def reference_config(
    fields: dict[str, Any], source: str = "spec", overrides: Sequence[str] = ()
) -> ReferenceTargetConfig:
    """A ``[target.reference]`` table as the reference target's validated config.

    Returns a ``targets.serving.config.ReferenceTargetConfig``, imported only here: specs
    of the other kinds load without torch. Without torch, or with a knob the target does
    not have, a ``SpecError`` says what to do (exit 2).
    """
    needs = f"{source}: target.kind = 'reference' needs PyTorch and the reference extra"
    if not reference_install.torch_installed():
        raise SpecError(f"{needs}; install them with: {REFERENCE_INSTALL}")
    try:
        from moeperf.targets.serving.config import ReferenceTargetConfig
    except ImportError as exc:
        raise SpecError(f"{needs} ({exc}); install them with: {REFERENCE_INSTALL}") from None
    table = ("target", "reference")
    valid = list(ReferenceTargetConfig.model_fields)
    unknown = [unknown_field((*table, name), valid) for name in fields if name not in valid]
    if unknown:
        raise spec_error(source, unknown, overrides)
    try:
        return ReferenceTargetConfig.model_validate(fields)
    except ValidationError as exc:
        problems = problems_of(exc, ReferenceTargetConfig, table)
        raise spec_error(source, problems, overrides) from None
