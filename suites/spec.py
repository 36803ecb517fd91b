"""Suite specs: TOML files validated at the edge with pydantic.

A wrong field names itself and the valid choices; every check runs before any load is
sent. ``validate_spec`` is the one way in, whatever built the data (``load_spec`` from a
file, ``moeperf calibrate`` from its flags, the gate's paired blocks); ``--set key=value``
overrides are applied to the raw data before validation, so they are checked exactly like
the file, and a problem they cause names the flag (suites/spec_overrides.py).

Each target's own config validates its table: ``[target.synthetic]`` is
``targets.synthetic.config.SyntheticConfig`` and ``[target.reference]`` is
``targets.serving.config.ReferenceTargetConfig``. targets import nothing of ours, so their
errors are translated here into a ``SpecError`` naming the field (exit 2).
"""

from __future__ import annotations

import copy
import difflib
import importlib.util
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    Field,
    PlainSerializer,
    PlainValidator,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from moeperf.collectors.min_effects import MIN_EFFECT_KEYS
from moeperf.collectors.request_settings import SAMPLING_FIELDS, Sampling
from moeperf.suites.errors import SpecError
from moeperf.suites.serving.faults.spec import DrillSpec
from moeperf.suites.serving.load.openai_api import MaxTokensField
from moeperf.suites.serving.locust_spec import LocustSpec
from moeperf.suites.serving.soak.spec import SoakSpec
from moeperf.suites.spec_base import STRICT, NonNegative, Positive
from moeperf.suites.spec_errors import NO_ECHO, problems_of, spec_error, unknown_field
from moeperf.suites.spec_overrides import apply_overrides, blame
from moeperf.suites.telemetry_spec import TelemetrySpec
from moeperf.suites.workload_spec import LengthSpec, WorkloadSpec
from moeperf.targets.synthetic.config import SyntheticConfig

if TYPE_CHECKING:
    from moeperf.suites.accuracy.spec import AccuracySpec
    from moeperf.suites.simulation.spec import SimulationSpec
    from moeperf.suites.training.dist_spec import DistTrainingSpec
    from moeperf.suites.training.spec import TrainingSpec
    from moeperf.targets.serving.config import ReferenceTargetConfig

SPEC_DIR = Path(__file__).parent / "specs"


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
    ``{ env = "NAME" }``. The value is never stored (README "Driving a real server")."""

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

    kind: Literal["synthetic", "url", "reference"] = "synthetic"
    url: str = ""
    api: Literal["chat", "completions"] = "completions"
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
    # Ask for vLLM's per-chunk usage (exact tokens per chunk). Turn off for servers that
    # reject unknown stream_options.
    continuous_usage: bool = True
    # Ask for usage at all (stream_options.include_usage). False sends no stream_options,
    # for servers that reject the field; output tokens then come from the tokenizer.
    include_usage: bool = True
    ignore_eos: bool = True
    # The name the target takes the output cap under (OpenAI's newer name, or the old one).
    max_tokens_field: MaxTokensField = "max_tokens"
    # vLLM / SGLang: generate at least this many tokens (None: not sent).
    min_tokens: Annotated[int, Field(ge=0)] | None = None
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


# A level lasts this long unless load.duration_s says otherwise, or max_requests alone
# bounds it; such a count-bound level still stops sending after COUNT_BOUND_LIMIT_S.
DEFAULT_DURATION_S = 10.0
COUNT_BOUND_LIMIT_S = 600.0


class LoadSpec(_Strict):
    """A sweep: one level per entry of ``levels`` (streams, or requests/s for open loop).

    A level is bounded by time (``duration_s``) and, if given, by ``max_requests`` (every
    request sent counts, warm-up ones included): whichever comes first. With
    ``max_requests`` and no ``duration_s`` the count alone bounds it (``duration_s`` stays
    None, there is no cool-down, and ``COUNT_BOUND_LIMIT_S`` is its safety limit).
    """

    # "trace": replay workload.trace at its recorded times; levels are speed-ups.
    mode: Literal["concurrency", "poisson", "gamma", "trace"] = "concurrency"
    levels: Annotated[list[Annotated[float, Field(gt=0)]], Field(min_length=1)] = [1.0]
    duration_s: Positive | None = None
    max_requests: Annotated[int, Field(ge=1)] | None = None
    warmup_s: NonNegative = 1.0
    cooldown_s: NonNegative = 0.5
    drain_timeout_s: NonNegative = 10.0
    burstiness: Positive = 1.0
    # Open loop: cap on requests in flight (0 = none).
    max_concurrency: Annotated[int, Field(ge=0)] = 0
    workers: Annotated[int, Field(ge=1)] | Literal["auto"] = "auto"
    # "asyncio": the precise engine (one event loop per worker process); "locust": Locust
    # workers under a master, on this host or several ([locust]; closed loop only).
    engine: Literal["asyncio", "locust"] = "asyncio"
    seed: int = 0
    # Every level this many times, interleaved (all levels, then all again): the spread
    # between repeats is shown beside each level's own confidence interval.
    repeats: Annotated[int, Field(ge=1)] = 1

    @model_validator(mode="before")
    @classmethod
    def _bound(cls, data: Any) -> Any:
        # Without duration_s: the default duration, unless max_requests alone bounds the
        # level; then the cool-down defaults to none (a count has no known end).
        if isinstance(data, dict) and data.get("mode") == "trace":
            # A trace's requests are all measured, its duration is its own (duration_s,
            # if given, cuts it short).
            return {"warmup_s": 0.0, "cooldown_s": 0.0, **data}
        if not isinstance(data, dict) or data.get("duration_s") is not None:
            return data
        if data.get("max_requests") is None:
            return {**data, "duration_s": DEFAULT_DURATION_S}
        return {"cooldown_s": 0.0, **data}

    @property
    def count_bound(self) -> bool:
        """True when load.max_requests alone bounds each level."""
        return self.duration_s is None and self.mode != "trace"

    @property
    def level_limit_s(self) -> float:
        """How long a level may send: duration_s, or a count-bound level's safety limit."""
        return COUNT_BOUND_LIMIT_S if self.duration_s is None else self.duration_s

    @model_validator(mode="after")
    def _window(self) -> LoadSpec:
        if self.duration_s is not None and self.warmup_s + self.cooldown_s >= self.duration_s:
            raise ValueError(
                "load.warmup_s + load.cooldown_s must be less than load.duration_s "
                f"({self.warmup_s} + {self.cooldown_s} >= {self.duration_s})"
            )
        if self.count_bound:
            self._check_count_bound(self.max_requests or 0)
        if self.mode == "concurrency" and any(level != int(level) for level in self.levels):
            raise ValueError(
                "load.levels must be whole numbers of streams when mode = 'concurrency'"
            )
        return self

    def _check_count_bound(self, max_requests: int) -> None:
        if self.cooldown_s > 0:
            raise ValueError(
                "load.cooldown_s must be 0 when load.max_requests alone bounds a level (no "
                "load.duration_s): a count has no known end to cool down before; remove "
                "load.cooldown_s or set load.duration_s"
            )
        if self.warmup_s >= COUNT_BOUND_LIMIT_S:
            raise ValueError(
                f"load.warmup_s must be less than {COUNT_BOUND_LIMIT_S:g} s, the safety limit "
                "of a level bounded by load.max_requests alone"
            )
        if self.mode != "concurrency":
            slowest = min(self.levels)
            expected_s = max_requests / slowest
            if expected_s > COUNT_BOUND_LIMIT_S / 2:
                raise ValueError(
                    f"load.max_requests = {max_requests} at {slowest:g} requests/s is about "
                    f"{expected_s:.0f} s of arrivals, more than half the {COUNT_BOUND_LIMIT_S:g} s "
                    "safety limit of a level bounded by its count alone; set load.duration_s"
                )


class SloSpec(_Strict):
    ttft_s: Positive | None = None
    tpot_s: Positive | None = None
    e2e_s: Positive | None = None


class HarnessSpec(_Strict):
    request_timeout_s: Positive = 300.0
    stall_timeout_s: Positive = 60.0
    # The run is invalid when the client, not the target, may have set the numbers.
    max_loop_lag_p99_s: Positive = 0.002
    max_cpu_fraction: Annotated[float, Field(gt=0, le=1)] = 0.9
    min_achieved_rate_ratio: Annotated[float, Field(gt=0, le=1)] = 0.95


class ExportSpec(_Strict):
    """Live Prometheus export and target scraping. The Pushgateway URL is not a spec
    field (it may carry credentials, and specs are stored in the manifest): give it with
    ``--pushgateway URL`` or MOEPERF_PUSHGATEWAY_URL."""

    live_metrics: bool = True
    # 0 picks a free port (printed at start); Prometheus needs a fixed one, e.g. 9464.
    metrics_port: Annotated[int, Field(ge=0, le=65535)] = 0
    scrape_target: bool = True
    scrape_interval_s: Positive = 2.0


class GateSpec(_Strict):
    """The regression gate's settings for runs of this spec (``moeperf gate`` reads them
    from the candidate's resolved spec; its command-line flags win)."""

    # Minimum effects (the smallest change the gate fails on, a fraction) by metric class
    # or by metric, e.g. { latency_p99 = 0.20, ttft_s_p99 = 0.08, throughput = 0.05 };
    # keys not set keep the gate's defaults (collectors/min_effects.py, in the README).
    min_effects: dict[str, Annotated[float, Field(ge=0, lt=1)]] = {}

    @field_validator("min_effects")
    @classmethod
    def _known_classes(cls, value: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(value) - set(MIN_EFFECT_KEYS))
        if unknown:
            raise ValueError(
                f"unknown key(s) {', '.join(map(repr, unknown))}; valid keys: "
                f"{', '.join(MIN_EFFECT_KEYS)}"
            )
        return value


# A [sampling] key set to this is not sent (the target's default). TOML has no null, so
# this is how a spec leaves out temperature, whose default (0.0, greedy) is sent.
SERVER_DEFAULT = "server-default"
_SEED_RANGE = (-(2**63), 2**63 - 1)  # int64, as servers take it


class SamplingSpec(_Strict):
    """``[sampling]``: the sampling fields of every request, sent only when set (None:
    not sent, the target's own default). The default is greedy decoding, temperature 0.0
    and nothing else, as moeperf always sent; ``seed`` is the same in every request."""

    temperature: float | None = 0.0
    top_p: float | None = None
    # Not an OpenAI field (vLLM, SGLang and TGI take it).
    top_k: int | None = None
    seed: int | None = None

    @field_validator("temperature", "top_p", "top_k", "seed", mode="before")
    @classmethod
    def _server_default(cls, value: Any, info: ValidationInfo) -> Any:
        if value == SERVER_DEFAULT:
            return None
        if isinstance(value, str | bool):
            kind = "a number" if info.field_name in ("temperature", "top_p") else "an integer"
            raise ValueError(
                f"{info.field_name} is {kind}, or {SERVER_DEFAULT!r} to send none (the "
                "target's default)"
            )
        return value

    @field_validator("temperature")
    @classmethod
    def _temperature(cls, value: float | None) -> float | None:
        if value is not None and not 0 <= value <= 2:
            raise ValueError(f"must be from 0 to 2 (0: greedy), or {SERVER_DEFAULT!r} to send none")
        return value

    @field_validator("top_p")
    @classmethod
    def _top_p(cls, value: float | None) -> float | None:
        if value is not None and not 0 < value <= 1:
            raise ValueError(
                "must be above 0 and at most 1 (1: no nucleus cut-off); leave it out to send none"
            )
        return value

    @field_validator("top_k")
    @classmethod
    def _top_k(cls, value: int | None) -> int | None:
        if value is not None and value < 1:
            raise ValueError(
                "must be at least 1; leave it out to send none (servers differ in how "
                "they spell 'no top-k': 0 or -1)"
            )
        return value

    @field_validator("seed")
    @classmethod
    def _seed(cls, value: int | None) -> int | None:
        low, high = _SEED_RANGE
        if value is not None and not low <= value <= high:
            raise ValueError(f"must be a 64-bit integer ({low} to {high})")
        return value

    def as_sent(self) -> Sampling:
        """The record the request builder sends and the manifest stores."""
        return Sampling(self.temperature, self.top_p, self.top_k, self.seed)


class CapacitySpec(_Strict):
    """``[capacity]``: search for the highest load level at which the SLOs below hold,
    instead of sweeping ``load.levels`` (suites/serving/capacity). Levels are streams
    (``load.mode = "concurrency"``) or requests/s (open loop); each probe is one level,
    bounded as ``[load]`` bounds a level. At least one criterion is needed."""

    start: Positive = 4.0
    growth: Annotated[float, Field(gt=1)] = 2.0
    min_level: Positive = 1.0
    max_level: Positive = 1024.0
    # Stop bisecting at this width (streams: 1, adjacent levels).
    resolution: Positive = 1.0
    max_probes: Annotated[int, Field(ge=2)] = 12
    ttft_p99_s: Positive | None = None
    tpot_p99_s: Positive | None = None
    # Goodput per [slo]: the fraction of measured requests that are ok and meet it.
    min_goodput_ratio: Annotated[float, Field(gt=0, le=1)] | None = None

    @model_validator(mode="after")
    def _criteria(self) -> CapacitySpec:
        if self.ttft_p99_s is None and self.tpot_p99_s is None and self.min_goodput_ratio is None:
            raise ValueError(
                "give at least one criterion: capacity.ttft_p99_s, capacity.tpot_p99_s or "
                "capacity.min_goodput_ratio"
            )
        if not self.min_level <= self.start <= self.max_level:
            raise ValueError(
                f"capacity.start ({self.start:g}) must lie from capacity.min_level "
                f"({self.min_level:g}) to capacity.max_level ({self.max_level:g})"
            )
        return self


class InputTokensSweep(_Strict):
    """``[sweep.input_tokens]``: the prompt lengths (tokens) every load level runs at:
    ``values`` as listed, else ``points`` lengths log-spaced from ``min`` to ``max``
    (rounded to whole tokens). ``max = "context"`` is the target's context limit less the
    output tokens: the limit /v1/models states (``max_model_len``), or ``context_tokens``
    for a target that states none. A length the context cannot hold is "not available
    from this target" in the result, and is not sent."""

    values: list[Annotated[int, Field(ge=1)]] = []
    min: Annotated[int, Field(ge=1)] = 16
    max: Annotated[int, Field(ge=1)] | Literal["context"] = "context"
    points: Annotated[int, Field(ge=1, le=64)] = 6
    # The target's context limit (prompt + output tokens), when /v1/models does not say.
    context_tokens: Annotated[int, Field(ge=2)] | None = None

    @model_validator(mode="after")
    def _range(self) -> InputTokensSweep:
        if self.values and len(set(self.values)) != len(self.values):
            raise ValueError("sweep.input_tokens.values lists a length twice")
        if not self.values and self.max != "context" and self.max < self.min:
            raise ValueError(
                f"sweep.input_tokens.max ({self.max}) is below sweep.input_tokens.min ({self.min})"
            )
        return self


class FitSpec(_Strict):
    """``[sweep.fit]``: at each prompt length, after its load levels, search for the most
    concurrent streams that fit: every stream's request running at once, none preempted
    (suites/serving/sweep_fit.py), bracketing from ``start`` by ``growth`` then bisection
    to one stream. Each probe holds its streams for ``probe_s`` (requests still running
    then are cancelled), judged from the target's scraped counters."""

    start: Annotated[int, Field(ge=1)] = 1
    growth: Annotated[float, Field(gt=1)] = 2.0
    max_streams: Annotated[int, Field(ge=1)] = 256
    max_probes: Annotated[int, Field(ge=2)] = 10
    probe_s: Positive = 5.0


class SweepSpec(_Strict):
    """``[sweep]``: run every level of ``load.levels`` at each prompt length of
    ``[sweep.input_tokens]`` (the prefill and long-context suites); each (length, level)
    pair is one scenario, named "in=LENGTH c=STREAMS" (or "in=LENGTH rate=R"). With
    ``[sweep.fit]``, also how many streams of each length fit at once."""

    input_tokens: InputTokensSweep = InputTokensSweep()
    fit: FitSpec | None = None


class InterferenceSpec(_Strict):
    """``[interference]``: prefill interference on the reference target against its
    chunked-prefill size (suites/serving/interference.py). One arm per entry of
    ``chunked_prefill_sizes`` (0: each prompt whole in one step), the target restarted
    with it; in each arm ``decode_streams`` closed-loop streams of short prompts and long
    outputs decode, first alone ("quiet") and then while long prompts arrive open loop at
    ``prefill_rate`` per second ("mixed"), each level ``duration_s`` long. The decoders'
    ITL, quiet against mixed, is the interference; the long prompts' TTFT is its price."""

    chunked_prefill_sizes: Annotated[
        list[Annotated[int, Field(ge=0)]], Field(min_length=1, max_length=16)
    ] = [0, 64, 256]
    decode_streams: Annotated[int, Field(ge=1, le=256)] = 4
    decode_input_tokens: Annotated[int, Field(ge=1)] = 64
    decode_output_tokens: Annotated[int, Field(ge=2)] = 128
    prefill_input_tokens: Annotated[int, Field(ge=1)] = 1536
    prefill_rate: Positive = 2.0
    duration_s: Positive = 10.0

    @field_validator("chunked_prefill_sizes")
    @classmethod
    def _distinct(cls, value: list[int]) -> list[int]:
        if len(set(value)) != len(value):
            raise ValueError("interference.chunked_prefill_sizes lists a size twice")
        return value


class MtpAbSpec(_Strict):
    """``[mtp_ab]``: MTP off against k draft tokens, A/B (suites/serving/mtp_ab/). One arm
    per entry of ``drafts`` (the first, 0, is the control: MTP off). The reference target
    runs one target per arm, started together; a url target gives one server per arm
    (``urls``) or one shell command per arm (``hooks``) that reconfigures the one server,
    run before each of that arm's blocks (the target must then answer within
    ``hook_timeout_s``). At each level of ``load.levels`` and each decoding mode, every arm
    runs ``blocks`` times, interleaved A B C, C B A, A B C ... so drift over time hits every
    arm alike; each block is one level of ``load.duration_s``. Greedy mode also checks that
    every arm's output tokens equal MTP off's for ``equality_prompts`` prompts."""

    drafts: Annotated[
        list[Annotated[int, Field(ge=0, le=16)]], Field(min_length=2, max_length=8)
    ] = [0, 1, 2]
    urls: list[str] = []
    hooks: list[str] = []
    hook_timeout_s: Positive = 300.0
    blocks: Annotated[int, Field(ge=1, le=20)] = 2
    modes: Annotated[list[Literal["greedy", "sampled"]], Field(min_length=1)] = [
        "greedy",
        "sampled",
    ]
    # The sampled mode's temperature (greedy is 0); the [sampling] section's is not used.
    sampled_temperature: Annotated[float, Field(gt=0, le=2)] = 1.0
    # Prompts whose greedy outputs are compared across arms (0: no check).
    equality_prompts: Annotated[int, Field(ge=0, le=1024)] = 16

    @model_validator(mode="after")
    def _arms(self) -> MtpAbSpec:
        if self.drafts[0] != 0:
            raise ValueError("mtp_ab.drafts must start with 0: MTP off is the control arm")
        if len(set(self.drafts)) != len(self.drafts):
            raise ValueError("mtp_ab.drafts lists a draft count twice")
        if len(set(self.modes)) != len(self.modes):
            raise ValueError("mtp_ab.modes lists a mode twice")
        if self.urls and self.hooks:
            raise ValueError("give mtp_ab.urls (a server per arm) or mtp_ab.hooks, not both")
        for name in ("urls", "hooks"):
            given = getattr(self, name)
            if given and len(given) != len(self.drafts):
                raise ValueError(
                    f"mtp_ab.{name} needs one entry per arm of mtp_ab.drafts "
                    f"({len(self.drafts)}), got {len(given)}"
                )
        for url in self.urls:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"mtp_ab.urls: {url!r} is not an http:// or https:// URL")
        return self


class PlanSpec(_Strict):
    """``[plan]``: the memory planner's prediction (suites/plan, README "Memory planning")
    drawn beside a sweep's measured KV usage. ``model``: a Hugging Face config.json (or a
    directory holding one); the reference target's own model when unset. The deployment:
    a DEPLOY file (``deploy``) or its fields inline (``[plan.deployment]``); on the
    reference target, unset, it is the target's own (one device, its dtype, context,
    running requests, chunk and drafts; layout "reference"), and the cache is its
    num_kv_blocks. ``block_tokens``: the target's KV block size (the reference's own when
    unset; vLLM's default is 16), so that blocks can be predicted."""

    model: str | None = None
    deploy: str | None = None
    deployment: dict[str, Any] = {}
    block_tokens: Annotated[int, Field(ge=1)] | None = None

    @model_validator(mode="after")
    def _one_deployment(self) -> PlanSpec:
        if self.deploy is not None and self.deployment:
            raise ValueError("give plan.deploy (a file) or [plan.deployment], not both")
        return self


class ServingSpec(_Strict):
    suite: Literal["serving"] = "serving"
    name: str
    description: str = ""
    target: TargetSpec = TargetSpec()
    sampling: SamplingSpec = SamplingSpec()
    workload: WorkloadSpec = WorkloadSpec()
    load: LoadSpec = LoadSpec()
    slo: SloSpec = SloSpec()
    harness: HarnessSpec = HarnessSpec()
    export: ExportSpec = ExportSpec()
    gate: GateSpec = GateSpec()
    # Set: an SLO capacity search instead of the sweep of load.levels.
    capacity: CapacitySpec | None = None
    # Set: load.levels at each of several prompt lengths.
    sweep: SweepSpec | None = None
    # Set: prefill interference against the chunked-prefill size (reference target only).
    interference: InterferenceSpec | None = None
    # Set: MTP off against k draft tokens, interleaved A/B blocks.
    mtp_ab: MtpAbSpec | None = None
    # Set: the memory planner's KV prediction beside a sweep's measured KV usage.
    plan: PlanSpec | None = None
    # Set: faults injected into the one level, and the requests' recovery from each.
    drill: DrillSpec | None = None
    # The Locust engine's layout (load.engine = "locust").
    locust: LocustSpec = LocustSpec()
    # The accelerator sampler beside the levels (suites/telemetry_spec.py).
    telemetry: TelemetrySpec = TelemetrySpec()

    @model_validator(mode="after")
    def _locust_runs_closed_loop(self) -> ServingSpec:
        if self.load.engine != "locust":
            # Set to anything but its defaults (a resolved spec carries the defaults).
            if self.locust != LocustSpec():
                raise ValueError("[locust] is for load.engine = 'locust' (or --engine locust)")
            return self
        if self.load.mode != "concurrency":
            raise ValueError(
                "load.engine = 'locust' runs closed-loop levels (load.mode = 'concurrency'): "
                "Locust starts users, it does not send at set times; open-loop rates and "
                "traces need load.engine = 'asyncio'"
            )
        unsupported = [name for name in ("interference", "mtp_ab") if getattr(self, name)]
        if self.workload.conversation is not None:
            unsupported.append("workload.conversation")
        if unsupported:
            raise ValueError(
                "load.engine = 'locust' does not run "
                + ", ".join(f"[{u}]" for u in unsupported)
                + ": use load.engine = 'asyncio'"
            )
        return self

    # Set: the one level is a soak, watched for slow degradation (memory, latency, KV).
    soak: SoakSpec | None = None

    @model_validator(mode="after")
    def _soak_alone(self) -> ServingSpec:
        if self.soak is None:
            return self
        others = [name for name in ("capacity", "sweep", "interference", "mtp_ab", "plan",
                                    "drill") if getattr(self, name) is not None]  # fmt: skip
        load = self.load
        if others or len(load.levels) != 1 or load.repeats != 1 or load.duration_s is None:
            raise ValueError(
                "[soak] watches one load level over its duration: give one load.levels "
                "entry, load.duration_s, no load.repeats, and no "
                + ", ".join(f"[{o}]" for o in others or ["drill"])
            )
        measured_s = load.duration_s - load.warmup_s - load.cooldown_s
        if problems := self.soak.check_level(measured_s):
            raise ValueError("; ".join(problems))
        return self

    @model_validator(mode="after")
    def _drill_alone(self) -> ServingSpec:
        drill = self.drill
        if drill is None:
            return self
        others = [name for name in ("capacity", "sweep", "interference", "mtp_ab", "plan")
                  if getattr(self, name) is not None]  # fmt: skip
        if others or len(self.load.levels) != 1 or self.load.repeats != 1:
            raise ValueError(
                "[drill] injects its faults into one load level: give one load.levels entry, "
                "no load.repeats, and no " + ", ".join(f"[{o}]" for o in others or ["sweep"])
            )
        if problems := drill.check_target(self.target.kind):
            raise ValueError("; ".join(problems))
        if self.load.engine == "locust" and any(f.kind == "drop_pool" for f in drill.faults):
            raise ValueError("a drop_pool fault needs load.engine = 'asyncio' (its workers)")
        last = drill.faults[-1]
        if last.at_s + last.planned_s >= self.load.level_limit_s:
            raise ValueError(
                f"the last fault ({last.kind} at {last.at_s:g} s) ends after the level's "
                f"{self.load.level_limit_s:g} s: raise load.duration_s past it, with time to "
                "recover"
            )
        return self

    @model_validator(mode="after")
    def _plan_beside_a_sweep(self) -> ServingSpec:
        plan = self.plan
        if plan is None:
            return self
        if self.sweep is None:
            raise ValueError(
                "[plan] draws the planner's KV prediction beside a sweep over prompt "
                "lengths: it needs [sweep] (or use moeperf plan memory)"
            )
        if self.target.kind != "reference" and (
            plan.model is None or (plan.deploy is None and not plan.deployment)
        ):
            raise ValueError(
                "[plan] for a url or synthetic target needs plan.model (its config.json) and "
                "plan.deploy or [plan.deployment]: only the reference target's are known"
            )
        return self

    @model_validator(mode="after")
    def _goodput_needs_slo(self) -> ServingSpec:
        wants_goodput = self.capacity is not None and self.capacity.min_goodput_ratio is not None
        no_slo = self.slo.ttft_s is None and self.slo.tpot_s is None and self.slo.e2e_s is None
        if wants_goodput and no_slo:
            raise ValueError(
                "capacity.min_goodput_ratio counts requests meeting [slo]: set "
                "slo.ttft_s, slo.tpot_s or slo.e2e_s"
            )
        return self

    @model_validator(mode="after")
    def _workload_fits_the_load(self) -> ServingSpec:
        workload, load = self.workload, self.load
        if (workload.kind == "trace") != (load.mode == "trace"):
            raise ValueError(
                "workload.kind = 'trace' and load.mode = 'trace' go together: a trace is "
                "replayed at its own times (load.levels are speed-ups)"
            )
        if workload.kind == "trace" and (self.capacity or self.sweep or self.interference):
            raise ValueError(
                "a trace replay cannot be combined with [capacity], [sweep] or [interference]"
            )
        if workload.conversation is not None:
            if self.target.api != "chat":
                raise ValueError(
                    "[workload.conversation] sends each turn's history as chat messages: "
                    "set target.api = 'chat'"
                )
            if load.mode != "concurrency":
                raise ValueError(
                    "[workload.conversation] holds one conversation per stream: set "
                    "load.mode = 'concurrency' (load.levels: conversations in parallel)"
                )
        if (workload.conversation or workload.prefix) and (self.sweep or self.interference):
            raise ValueError(
                "[workload.conversation] and [workload.prefix] set the prompts: they cannot "
                "be combined with [sweep] or [interference]"
            )
        if load.repeats > 1 and (self.capacity is not None or self.interference is not None):
            raise ValueError(
                "load.repeats applies to a sweep of levels: a capacity search or an "
                "interference run plans its own levels; remove load.repeats"
            )
        return self

    @model_validator(mode="after")
    def _interference_restarts_the_reference(self) -> ServingSpec:
        if self.interference is None:
            return self
        if self.target.kind != "reference":
            raise ValueError(
                "[interference] restarts the target with each chunked_prefill_size: it "
                "needs target.kind = 'reference'"
            )
        if self.capacity is not None or self.sweep is not None:
            raise ValueError("[interference] cannot be combined with [capacity] or [sweep]")
        if "chunked_prefill_size" in self.target.reference:
            raise ValueError(
                "[interference] sets target.reference.chunked_prefill_size in each arm: "
                "remove it (list the sizes in interference.chunked_prefill_sizes)"
            )
        if self.workload.kind != "random":
            raise ValueError("[interference] needs workload.kind = 'random' (exact lengths)")
        return self

    @model_validator(mode="after")
    def _mtp_ab_arms(self) -> ServingSpec:
        ab = self.mtp_ab
        if ab is None:
            return self
        kind = self.target.kind
        if kind == "synthetic":
            raise ValueError("[mtp_ab] needs target.kind = 'reference' or 'url'")
        if kind == "reference" and (ab.urls or ab.hooks):
            raise ValueError(
                "[mtp_ab] on the reference target starts one target per arm: remove "
                "mtp_ab.urls and mtp_ab.hooks"
            )
        if kind == "reference" and "mtp_tokens" in self.target.reference:
            raise ValueError(
                "[mtp_ab] sets target.reference.mtp_tokens in each arm: remove it (list the "
                "draft counts in mtp_ab.drafts)"
            )
        if kind == "url" and not (ab.urls or ab.hooks):
            raise ValueError(
                "[mtp_ab] against a url target needs mtp_ab.urls (one server per arm) or "
                "mtp_ab.hooks (a command per arm that reconfigures target.url)"
            )
        if self.capacity or self.sweep or self.interference:
            raise ValueError(
                "[mtp_ab] cannot be combined with [capacity], [sweep] or [interference]"
            )
        workload = self.workload
        if workload.kind != "random" or workload.conversation or workload.prefix:
            raise ValueError(
                "[mtp_ab] needs workload.kind = 'random' without [workload.conversation] or "
                "[workload.prefix]: every arm gets the same prompts"
            )
        if self.load.mode != "concurrency" or self.load.repeats != 1:
            raise ValueError(
                "[mtp_ab] runs load.levels as concurrent streams (load.mode = 'concurrency'), "
                "and repeats each arm by itself (mtp_ab.blocks): remove load.repeats"
            )
        return self

    @model_validator(mode="after")
    def _sweep_sets_the_prompts(self) -> ServingSpec:
        if self.sweep is None:
            return self
        if self.capacity is not None:
            raise ValueError(
                "[sweep] and [capacity] cannot be combined (yet): a capacity search runs at "
                "one prompt length; remove one of them"
            )
        if self.workload.kind != "random":
            raise ValueError(
                "[sweep] needs workload.kind = 'random': it builds prompts of exact lengths"
            )
        if "input_tokens" in self.workload.model_fields_set:
            raise ValueError(
                "[sweep] sets the prompt length of each scenario: remove workload.input_tokens"
            )
        if self.workload.shared_prefix_tokens:
            raise ValueError(
                "[sweep] measures prefill of whole prompts: remove workload.shared_prefix_tokens"
            )
        fit = self.sweep.fit
        if fit is not None and not self.export.scrape_target:
            raise ValueError(
                "[sweep.fit] judges each probe from the target's own counters: set "
                "export.scrape_target = true"
            )
        if fit is not None and self.export.scrape_interval_s > fit.probe_s / 5:
            raise ValueError(
                f"sweep.fit.probe_s ({fit.probe_s:g} s) must hold at least 5 scrapes of the "
                f"target: lower export.scrape_interval_s ({self.export.scrape_interval_s:g} s) "
                "or raise sweep.fit.probe_s"
            )
        if self.sweep.input_tokens.max == "context" and not self.sweep.input_tokens.values:
            output = self.workload.output_tokens
            if output.dist != "fixed" and output.max >= LengthSpec().max:
                raise ValueError(
                    "sweep.input_tokens.max = 'context' leaves room for the output tokens: "
                    "set workload.output_tokens.max (or dist = 'fixed')"
                )
        return self

    @property
    def max_output_tokens(self) -> int:
        """The most output tokens one request of this spec asks for."""
        output = self.workload.output_tokens
        return output.mean if output.dist == "fixed" else output.max


@dataclass(frozen=True)
class LoadedSpec:
    """A validated spec and the data it was validated from."""

    # As given, overrides applied: what the run's manifest stores.
    given: dict[str, Any]
    spec: ServingSpec | TrainingSpec | DistTrainingSpec | AccuracySpec | SimulationSpec
    # The spec file, or what built the data ("calibrate"): named in errors.
    source: str

    @property
    def serving(self) -> ServingSpec:
        """The spec, for a command that runs serving specs only (SpecError otherwise)."""
        if not isinstance(self.spec, ServingSpec):
            raise SpecError(f"{self.source}: suite {self.spec.suite!r}; a serving spec is needed")
        return self.spec

    @property
    def training(self) -> TrainingSpec:
        """The spec, for a command that runs training specs only (SpecError otherwise)."""
        if self.spec.suite != "training":
            raise SpecError(f"{self.source}: suite {self.spec.suite!r}; a training spec is needed")
        return self.spec

    @property
    def training_dist(self) -> DistTrainingSpec:
        """The spec, for the distributed training suite (SpecError otherwise)."""
        if self.spec.suite != "training-dist":
            raise SpecError(
                f"{self.source}: suite {self.spec.suite!r}; a training-dist spec is needed"
            )
        return self.spec

    @property
    def simulation(self) -> SimulationSpec:
        """The spec, for the simulation suite (SpecError otherwise)."""
        if self.spec.suite != "simulation":
            raise SpecError(
                f"{self.source}: suite {self.spec.suite!r}; a simulation spec is needed"
            )
        return self.spec

    @property
    def accuracy(self) -> AccuracySpec:
        """The spec, for the accuracy suite (SpecError otherwise)."""
        if self.spec.suite != "accuracy":
            raise SpecError(f"{self.source}: suite {self.spec.suite!r}; an accuracy spec is needed")
        return self.spec


def resolve_spec_path(name_or_path: str) -> Path:
    """A path to a TOML file, or the name of a spec shipped in suites/specs/."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    shipped = SPEC_DIR / f"{name_or_path}.toml"
    if shipped.is_file():
        return shipped
    names = sorted(p.stem for p in SPEC_DIR.glob("*.toml"))
    close = difflib.get_close_matches(path.stem, names, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise SpecError(f"no spec file {name_or_path!r}{hint}; shipped specs: {', '.join(names)}")


def load_spec(name_or_path: str, overrides: Sequence[str] = ()) -> LoadedSpec:
    """Read a spec file (or a shipped spec by name), override and validate it."""
    path = resolve_spec_path(name_or_path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{path}: not valid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise SpecError(f"{path}: not UTF-8 text, as TOML must be ({exc.reason} at byte "
                        f"{exc.start}); give a TOML spec file") from None  # fmt: skip
    except OSError as exc:
        raise SpecError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    return validate_spec(data, str(path), overrides)


def validate_spec(
    data: Mapping[str, Any], source: str, overrides: Sequence[str] = ()
) -> LoadedSpec:
    """``data`` with ``overrides`` applied, validated as the spec of its suite: a
    ``ServingSpec``, a ``suites.training.spec.TrainingSpec`` for suite "training", or a
    ``suites.accuracy.spec.AccuracySpec`` for suite "accuracy".

    A ``SpecError`` lists every problem, under ``source`` or under the ``--set`` that
    caused it. ``data`` itself is left as it is.
    """
    given = apply_overrides(copy.deepcopy(dict(data)), overrides)
    suite = given.get("suite", "serving")
    if suite == "training":
        return LoadedSpec(given, _training_spec(given, source, overrides), source)
    if suite == "training-dist":
        return LoadedSpec(given, _training_spec(given, source, overrides, dist=True), source)
    if suite == "accuracy":
        from moeperf.suites.accuracy.spec import validate_accuracy

        return LoadedSpec(given, validate_accuracy(given, source, overrides), source)
    if suite == "simulation":
        from moeperf.suites.simulation.spec import validate_simulation

        return LoadedSpec(given, validate_simulation(given, source, overrides), source)
    if suite != "serving":
        culprits = blame(overrides, [("suite",)])
        where = ", ".join(f"--set {o.text}" for o in culprits) or source
        raise SpecError(
            f"{where}: unknown suite {suite!r}; valid suites: serving, training, "
            "training-dist, accuracy, simulation"
        )
    try:
        spec = ServingSpec.model_validate(given)
    except ValidationError as exc:
        raise spec_error(source, problems_of(exc, ServingSpec), overrides) from None
    if spec.target.kind == "reference":
        reference_config(spec.target.reference, source, overrides)
    if spec.plan is not None:
        from moeperf.suites.serving.sweep_plan import resolve_plan  # needs the planner: only here

        resolve_plan(spec, source)  # a config or deployment it cannot use: exit 2 now
    return LoadedSpec(given, spec, source)


def spec_data_path(path: str) -> Path:
    """Where a file a spec names is: as given (absolute, or relative to the working
    directory), else relative to the shipped specs (``traces/small-mooncake.jsonl``)."""
    given = Path(path).expanduser()
    if given.is_absolute() or given.exists():
        return given
    shipped = SPEC_DIR / given
    return shipped if shipped.exists() else given


# PyPI's Linux torch wheel is the CUDA build (with ~20 nvidia-* packages, several GB): a
# machine without a GPU takes the CPU build from PyTorch's own index (README "Installing").
TORCH_CPU_INDEX_URL = "https://download.pytorch.org/whl/cpu"
REFERENCE_INSTALL = (
    f"pip install torch==2.13.0 --index-url {TORCH_CPU_INDEX_URL} (the CPU build; "
    "without --index-url on a CUDA machine), then pip install '.[reference]'"
)


def _training_spec(
    data: dict[str, Any], source: str, overrides: Sequence[str], *, dist: bool = False
) -> TrainingSpec | DistTrainingSpec:
    """A training (or training-dist) spec, validated by suites.training (imported only here:
    it needs torch)."""
    if not torch_installed():
        raise SpecError(
            f"{source}: suite {data.get('suite')!r} runs the reference trainer, which needs "
            f"PyTorch and the reference extra; install them with: {REFERENCE_INSTALL}"
        )
    if dist:
        from moeperf.suites.training.dist_spec import validate_training_dist

        return validate_training_dist(data, source, overrides)
    from moeperf.suites.training.spec import validate_training

    return validate_training(data, source, overrides)


def torch_installed() -> bool:
    """Whether PyTorch can be imported here (found, not imported: that takes seconds)."""
    return importlib.util.find_spec("torch") is not None


def reference_config(
    fields: dict[str, Any], source: str = "spec", overrides: Sequence[str] = ()
) -> ReferenceTargetConfig:
    """A ``[target.reference]`` table as the reference target's validated config.

    Returns a ``targets.serving.config.ReferenceTargetConfig``, imported only here: specs
    of the other kinds load without torch. Without torch, or with a knob the target does
    not have, a ``SpecError`` says what to do (exit 2).
    """
    needs = f"{source}: target.kind = 'reference' needs PyTorch and the reference extra"
    if not torch_installed():
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
