"""Suite specs: TOML files validated at the edge with pydantic.

A wrong field names itself and the valid choices; every check runs before any load is
sent. ``--set key=value`` overrides are applied to the raw TOML data before validation,
so they are checked exactly like the file.
"""

from __future__ import annotations

import difflib
import importlib.util
import tomllib
import typing
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from suites.errors import SpecError

SPEC_DIR = Path(__file__).parent / "specs"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


Positive = Annotated[float, Field(gt=0)]
NonNegative = Annotated[float, Field(ge=0)]


class SyntheticTargetSpec(_Strict):
    """The embedded ground-truth server's latencies and faults (targets/synthetic)."""

    ttft_s: NonNegative = 0.05
    itl_s: NonNegative = 0.01
    tokens_per_chunk: Annotated[int, Field(ge=1)] = 1
    jitter: Literal["none", "uniform", "normal", "lognormal", "exponential"] = "none"
    jitter_scale: NonNegative = 0.0
    error_rate: Annotated[float, Field(ge=0, le=1)] = 0.0
    stall_rate: Annotated[float, Field(ge=0, le=1)] = 0.0
    stall_s: NonNegative = 5.0
    malformed_rate: Annotated[float, Field(ge=0, le=1)] = 0.0
    truncate_rate: Annotated[float, Field(ge=0, le=1)] = 0.0
    seed: int = 0


class TargetSpec(_Strict):
    """What to drive: an embedded target moeperf starts (synthetic, reference), or a URL."""

    kind: Literal["synthetic", "url", "reference"] = "synthetic"
    url: str = ""
    api: Literal["chat", "completions"] = "completions"
    model: str = ""
    synthetic: SyntheticTargetSpec = SyntheticTargetSpec()
    # The reference serving engine's knobs (targets.serving.config.ReferenceTargetConfig).
    # Checked by reference_config() only when kind = "reference", so that a harness-only
    # install (no torch) still loads every other spec.
    reference: dict[str, Any] = {}
    # Ask for vLLM's per-chunk usage (exact tokens per chunk). Turn off for servers that
    # reject unknown stream_options.
    continuous_usage: bool = True
    ignore_eos: bool = True
    extra_body: dict[str, Any] = {}

    @model_validator(mode="after")
    def _url_needed(self) -> TargetSpec:
        if self.kind == "url" and not self.url.startswith(("http://", "https://")):
            raise ValueError("target.url must be an http:// or https:// URL when kind = 'url'")
        return self


class LengthSpec(_Strict):
    dist: Literal["fixed", "uniform", "normal", "lognormal"] = "fixed"
    mean: Annotated[int, Field(ge=1)] = 128
    spread: NonNegative = 0.0
    min: Annotated[int, Field(ge=1)] = 1
    max: Annotated[int, Field(ge=1)] = 1_000_000


class WorkloadSpec(_Strict):
    kind: Literal["random", "dataset"] = "random"
    input_tokens: LengthSpec = LengthSpec(mean=128)
    output_tokens: LengthSpec = LengthSpec(mean=64)
    shared_prefix_tokens: Annotated[int, Field(ge=0)] = 0
    dataset_path: str = ""
    # Distinct prompts built up front and cycled through.
    num_prompts: Annotated[int, Field(ge=1)] = 256
    # "" none, "server" (the target's /tokenize), or a local Hugging Face tokenizer dir.
    tokenizer: str = "server"
    seed: int = 0

    @model_validator(mode="after")
    def _dataset_needs_path(self) -> WorkloadSpec:
        if self.kind == "dataset" and not self.dataset_path:
            raise ValueError("workload.dataset_path is required when kind = 'dataset'")
        return self


class LoadSpec(_Strict):
    """A sweep: one level per entry of ``levels`` (streams, or requests/s for open loop)."""

    mode: Literal["concurrency", "poisson", "gamma"] = "concurrency"
    levels: Annotated[list[Annotated[float, Field(gt=0)]], Field(min_length=1)] = [1.0]
    duration_s: Positive = 10.0
    max_requests: Annotated[int, Field(ge=1)] | None = None
    warmup_s: NonNegative = 1.0
    cooldown_s: NonNegative = 0.5
    drain_timeout_s: NonNegative = 10.0
    burstiness: Positive = 1.0
    # Open loop: cap on requests in flight (0 = none).
    max_concurrency: Annotated[int, Field(ge=0)] = 0
    workers: Annotated[int, Field(ge=1)] | Literal["auto"] = "auto"
    seed: int = 0

    @model_validator(mode="after")
    def _window(self) -> LoadSpec:
        if self.warmup_s + self.cooldown_s >= self.duration_s:
            raise ValueError(
                "load.warmup_s + load.cooldown_s must be less than load.duration_s "
                f"({self.warmup_s} + {self.cooldown_s} >= {self.duration_s})"
            )
        if self.mode == "concurrency" and any(level != int(level) for level in self.levels):
            raise ValueError(
                "load.levels must be whole numbers of streams when mode = 'concurrency'"
            )
        return self


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


class ServingSpec(_Strict):
    suite: Literal["serving"] = "serving"
    name: str
    description: str = ""
    target: TargetSpec = TargetSpec()
    workload: WorkloadSpec = WorkloadSpec()
    load: LoadSpec = LoadSpec()
    slo: SloSpec = SloSpec()
    harness: HarnessSpec = HarnessSpec()
    export: ExportSpec = ExportSpec()


def _nested_fields(model: type[BaseModel], location: tuple) -> list[str]:
    """The valid field names at ``location`` in the spec model tree."""
    for part in location:
        if str(part).isdigit():  # an index into a list of tables: its items' fields
            continue
        field = model.model_fields.get(str(part))
        annotation = getattr(field, "annotation", None)
        if typing.get_origin(annotation) is list:
            annotation = typing.get_args(annotation)[0]
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return []
        model = annotation
    return list(model.model_fields)


def _unknown_field(where: str, name: str, valid: list[str]) -> str:
    close = difflib.get_close_matches(name, valid, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"  {where}: unknown field{hint} valid fields: {', '.join(valid)}"


def format_errors(
    error: ValidationError,
    source: str,
    root: type[BaseModel] = ServingSpec,
    prefix: tuple[str, ...] = (),
) -> str:
    """One line per problem: the dotted field, what is wrong, and what is valid.

    ``root`` is the model that was validated, found at ``prefix`` in the spec.
    """
    lines = [f"{source}: invalid spec"]
    for item in error.errors():
        location = tuple(str(p) for p in item["loc"])
        where = ".".join(prefix + location) or "(top level)"
        if item["type"] == "extra_forbidden":
            valid = _nested_fields(root, location[:-1])
            lines.append(_unknown_field(where, location[-1], valid))
        elif item["type"] == "missing":
            lines.append(f"  {where}: required field is missing")
        else:
            message = item["msg"].removeprefix("Value error, ")
            lines.append(f"  {where}: {message} (got {item.get('input')!r})")
    return "\n".join(lines)


def parse_override(assignment: str) -> tuple[list[str], Any]:
    """``load.levels=[1,4]`` -> (["load", "levels"], [1, 4]); bare words stay strings."""
    key, sep, raw = assignment.partition("=")
    if not sep or not key.strip():
        raise SpecError(f"--set {assignment!r}: expected KEY=VALUE, e.g. load.duration_s=5")
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()
    return key.strip().split("."), value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    for assignment in overrides:
        path, value = parse_override(assignment)
        node = data
        for part in path[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise SpecError(f"--set {assignment!r}: {part!r} is not a table")
            node = child
        node[path[-1]] = value
    return data


def resolve_spec_path(name_or_path: str) -> Path:
    """A path to a TOML file, or the name of a spec shipped in suites/specs/."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    shipped = SPEC_DIR / f"{name_or_path}.toml"
    if shipped.is_file():
        return shipped
    names = sorted(p.stem for p in SPEC_DIR.glob("*.toml"))
    raise SpecError(f"no spec file {name_or_path!r}; shipped specs: {', '.join(names)}")


def load_spec(name_or_path: str, overrides: list[str] = ()) -> tuple[dict[str, Any], Any]:
    """Read, override and validate a spec. Returns (the data as given, the spec): a
    ``ServingSpec``, or a ``suites.training.spec.TrainingSpec`` for suite "training"."""
    path = resolve_spec_path(name_or_path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{path}: not valid TOML: {exc}") from None
    data = apply_overrides(data, list(overrides))
    suite = data.get("suite", "serving")
    if suite == "training":
        return data, _training_spec(data, str(path))
    if suite != "serving":
        raise SpecError(f"{path}: unknown suite {suite!r}; valid suites: serving, training")
    try:
        spec = ServingSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(format_errors(exc, str(path))) from None
    if spec.target.kind == "reference":
        reference_config(spec.target.reference, str(path))
    return data, spec


REFERENCE_INSTALL = "pip install torch==2.13.0 '.[reference]'"


def _training_spec(data: dict[str, Any], source: str) -> Any:
    """A training spec, validated by suites.training (imported only here: it needs torch)."""
    if not torch_installed():
        raise SpecError(
            f"{source}: suite 'training' runs the reference trainer, which needs PyTorch and "
            f"the reference extra; install them with: {REFERENCE_INSTALL}"
        )
    from suites.training.spec import validate_training

    return validate_training(data, source)


def torch_installed() -> bool:
    """Whether PyTorch can be imported here (found, not imported: that takes seconds)."""
    return importlib.util.find_spec("torch") is not None


def reference_config(fields: dict[str, Any], source: str = "spec") -> Any:
    """A ``[target.reference]`` table as the reference target's validated config.

    Returns a ``targets.serving.config.ReferenceTargetConfig``, imported only here: specs
    of the other kinds load without torch. Without torch, or with a knob the target does
    not have, a ``SpecError`` says what to do (exit 2).
    """
    needs = f"{source}: target.kind = 'reference' needs PyTorch and the reference extra"
    if not torch_installed():
        raise SpecError(f"{needs}; install them with: {REFERENCE_INSTALL}")
    try:
        from targets.serving.config import ReferenceTargetConfig
    except ImportError as exc:
        raise SpecError(f"{needs} ({exc}); install them with: {REFERENCE_INSTALL}") from None
    valid = list(ReferenceTargetConfig.model_fields)
    unknown = [name for name in fields if name not in valid]
    if unknown:
        lines = [f"{source}: invalid spec"]
        lines += [_unknown_field(f"target.reference.{name}", name, valid) for name in unknown]
        raise SpecError("\n".join(lines))
    try:
        return ReferenceTargetConfig.model_validate(fields)
    except ValidationError as exc:
        prefix = ("target", "reference")
        raise SpecError(format_errors(exc, source, ReferenceTargetConfig, prefix)) from None
