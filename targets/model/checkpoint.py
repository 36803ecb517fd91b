"""A model directory: what ``save_model_dir`` writes and ``load_model_dir`` reads.

The layout is Hugging Face's, so ``transformers.AutoModelForCausalLM.from_pretrained(dir)``,
``AutoTokenizer.from_pretrained(dir)`` and vLLM load it, without a warning:

    config.json             MoEConfig.to_hf() or HybridConfig.to_hf()
    model.safetensors       the state dict (bfloat16 by default: half the bytes of float32)
    mtp.safetensors         mixtral only: the MTP module's weights (``mtp.*``), kept apart
    model.safetensors.index.json   mixtral only: names model.safetensors as the one file
    tokenizer.json          the byte-level BPE
    tokenizer_config.json   special tokens and the chat template
    generation_config.json  bos, and both stop tokens (</s> and <|end|>)
    recipe.json             how the weights were made: recipe, corpus hash, versions, losses
    SHA256SUMS              every other file's sha256, in ``sha256sum -c`` format

Two architectures, told apart by config.json's ``model_type`` (``ARCHITECTURES``):
"mixtral" (``MoETransformer``, the default model) and "qwen3_next" (``HybridMoETransformer``,
``hybrid_model_dir()``).

Why the mixtral MTP weights are a file of their own: Mixtral has no MTP module, and a strict
loader refuses a checkpoint with keys its model lacks (vLLM: "There is no module or
parameter named 'mtp' in MixtralForCausalLM"; transformers warns that they were not used).
vLLM reads every ``*.safetensors`` of a directory unless an index names the files to read,
so the index lists model.safetensors alone; transformers reads model.safetensors when it
exists and never looks at the index. Qwen3-Next's checkpoints carry ``mtp.*`` in the main
file, and both loaders skip those keys by name, so the hybrid directory keeps one file
(vLLM's qwen3_next_mtp drafter reads them from there).

The directory stays flat: package data ships ``default/*`` and ``hybrid/*`` and nothing
below them.
"""

from __future__ import annotations

import hashlib
import json
import platform
from pathlib import Path
from typing import Any, NamedTuple

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from moeperf.targets.model.config import MoEConfig
from moeperf.targets.model.hybrid import HybridMoETransformer
from moeperf.targets.model.hybrid_config import HybridConfig
from moeperf.targets.model.model import MoETransformer
from moeperf.targets.model.tokenizer import TOKENIZER_CONFIG_FILE, TOKENIZER_FILE, ChatTokenizer

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
MTP_WEIGHTS_FILE = "mtp.safetensors"
WEIGHTS_INDEX_FILE = "model.safetensors.index.json"
MTP_PREFIX = "mtp."
GENERATION_CONFIG_FILE = "generation_config.json"
RECIPE_FILE = "recipe.json"
CHECKSUMS_FILE = "SHA256SUMS"
REQUIRED_FILES = (CONFIG_FILE, WEIGHTS_FILE, TOKENIZER_FILE, TOKENIZER_CONFIG_FILE)

DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


# Either reference model: both train through ``model(idx, targets)`` and carry ``config``.
ReferenceModel = MoETransformer | HybridMoETransformer


class Architecture(NamedTuple):
    """A config.json ``model_type`` this module reads, and what it builds."""

    model_type: str
    hf_class: str  # config.json "architectures"[0], transformers' class
    config: type[MoEConfig] | type[HybridConfig]  # its from_hf() reads config.json


ARCHITECTURES = {
    arch.model_type: arch
    for arch in (
        Architecture("mixtral", "MixtralForCausalLM", MoEConfig),
        Architecture("qwen3_next", "Qwen3NextForCausalLM", HybridConfig),
    )
}
SUPPORTED_ARCHITECTURES = ", ".join(
    f"{a.model_type} ({a.hf_class})" for a in ARCHITECTURES.values()
)


class ModelDirError(Exception):
    """A model directory is missing, incomplete, or does not match its checksums."""


def default_model_dir() -> Path:
    """The model shipped with moeperf (``targets/model/default``)."""
    return Path(__file__).resolve().parent / "default"


def hybrid_model_dir() -> Path:
    """The hybrid (Qwen3-Next) model shipped with moeperf (``targets/model/hybrid``)."""
    return Path(__file__).resolve().parent / "hybrid"


def param_counts(model: ReferenceModel) -> dict[str, int]:
    """Total parameters, the MTP module's share, and those one token touches (top-k of E;
    a shared expert counts as always touched)."""
    cfg = model.config
    total = sum(p.numel() for p in model.parameters())
    # MoETransformer.mtp is a ModuleList (maybe empty); the hybrid's one module, or None.
    mtp_module: nn.Module | None = model.mtp
    mtp = sum(p.numel() for p in mtp_module.parameters()) if mtp_module is not None else 0
    experts = sum(p.numel() for n, p in model.model.named_parameters() if ".experts." in n)
    main = total - mtp
    return {
        "total": total,
        "main": main,
        "mtp": mtp,
        "main_experts": experts,
        # Mixtral's "active parameters": everything but the experts a token is not routed to.
        "main_active_per_token": main - experts + experts * cfg.top_k // cfg.num_experts,
    }


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")


def save_model_dir(
    model: ReferenceModel,
    tokenizer: ChatTokenizer,
    out_dir: Path,
    recipe: dict[str, Any],
    dtype: torch.dtype = torch.bfloat16,
) -> Path:
    """Write ``model`` and ``tokenizer`` to ``out_dir`` (created; existing files replaced).

    ``recipe`` goes to recipe.json, with the parameter counts, weight dtype and library
    versions added. Returns ``out_dir``.
    """
    if dtype not in DTYPE_NAMES:
        raise ValueError(f"dtype must be one of {sorted(DTYPE_NAMES.values())}, not {dtype}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    cfg = model.config

    hf_config = cfg.to_hf()
    hf_config["torch_dtype"] = DTYPE_NAMES[dtype]  # the dtype the weights are stored in
    _write_json(out_dir / CONFIG_FILE, hf_config)

    state = {k: v.detach().to("cpu", dtype).contiguous() for k, v in model.state_dict().items()}
    _save_weights(model, state, out_dir)

    tokenizer.save(out_dir)
    _write_json(
        out_dir / GENERATION_CONFIG_FILE,
        {
            "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": list(tokenizer.stop_token_ids),
            "pad_token_id": tokenizer.pad_token_id,
        },
    )
    _write_json(
        out_dir / RECIPE_FILE,
        {
            **recipe,
            "param_counts": param_counts(model),
            "weights_dtype": DTYPE_NAMES[dtype],
            "python_version": platform.python_version(),
            "torch_version": torch.__version__,
        },
    )
    write_checksums(out_dir)
    return out_dir


def _save_weights(model: ReferenceModel, state: dict[str, torch.Tensor], out_dir: Path) -> None:
    """model.safetensors, and for mixtral the MTP weights apart with an index naming the
    main file (the module docstring says why)."""
    for stale in (MTP_WEIGHTS_FILE, WEIGHTS_INDEX_FILE):
        (out_dir / stale).unlink(missing_ok=True)
    files = {WEIGHTS_FILE: state}
    if isinstance(model, MoETransformer):
        files = {
            WEIGHTS_FILE: {k: v for k, v in state.items() if not k.startswith(MTP_PREFIX)},
            MTP_WEIGHTS_FILE: {k: v for k, v in state.items() if k.startswith(MTP_PREFIX)},
        }
        main = files[WEIGHTS_FILE]
        index = {
            "metadata": {"total_size": sum(v.numel() * v.element_size() for v in main.values())},
            "weight_map": dict.fromkeys(sorted(main), WEIGHTS_FILE),
        }
        _write_json(out_dir / WEIGHTS_INDEX_FILE, index)
    for name, tensors in files.items():
        if not tensors:
            continue  # no MTP module (mtp_depth 0): no file for it
        # "format": "pt" is the metadata transformers expects in a PyTorch safetensors file.
        save_file(tensors, str(out_dir / name), metadata={"format": "pt"})
        (out_dir / name).chmod(0o644)  # safetensors creates it owner-only; ship it readable


def _load_weights(model_dir: Path) -> dict[str, torch.Tensor]:
    """Every tensor of the directory: model.safetensors and, where there is one, the MTP
    module's file."""
    state = load_file(str(model_dir / WEIGHTS_FILE))
    if (model_dir / MTP_WEIGHTS_FILE).is_file():
        state.update(load_file(str(model_dir / MTP_WEIGHTS_FILE)))
    return state


def write_checksums(model_dir: Path) -> None:
    """SHA256SUMS over every other file of the directory, sorted by name."""
    model_dir = Path(model_dir)
    names = sorted(p.name for p in model_dir.iterdir() if p.is_file() and p.name != CHECKSUMS_FILE)
    lines = [f"{sha256_file(model_dir / name)}  {name}\n" for name in names]
    (model_dir / CHECKSUMS_FILE).write_text("".join(lines))


def verify_model_dir(model_dir: Path) -> None:
    """Check every file listed in SHA256SUMS; raise ``ModelDirError`` naming the first
    file that is missing or differs."""
    model_dir = Path(model_dir)
    sums_path = model_dir / CHECKSUMS_FILE
    if not sums_path.is_file():
        raise ModelDirError(f"{sums_path} is missing: cannot verify the model directory")
    for line_no, line in enumerate(sums_path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        expected, sep, name = line.partition("  ")
        if not sep or len(expected) != 64:
            raise ModelDirError(f"{sums_path}:{line_no}: not '<sha256>  <file>': {line!r}")
        path = model_dir / name
        if not path.is_file():
            raise ModelDirError(f"{path} is listed in {CHECKSUMS_FILE} but missing")
        actual = sha256_file(path)
        if actual != expected:
            raise ModelDirError(
                f"{path} does not match {CHECKSUMS_FILE}: sha256 {actual}, expected {expected}"
            )


def model_architecture(model_dir: Path, hf_config: dict[str, Any]) -> Architecture:
    """The architecture config.json names (its ``model_type``); ``ModelDirError`` naming
    the directory, what it found and what is supported when it is none of ours."""
    model_type = hf_config.get("model_type")
    arch = ARCHITECTURES.get(model_type) if isinstance(model_type, str) else None
    if arch is None:
        raise ModelDirError(
            f"model directory {model_dir}: unsupported architecture: {CONFIG_FILE} has "
            f"model_type {model_type!r} (architectures {hf_config.get('architectures')!r}); "
            f"supported: {SUPPORTED_ARCHITECTURES}"
        )
    return arch


def load_model_dir(
    model_dir: Path, dtype: torch.dtype = torch.float32, verify: bool = True
) -> tuple[ReferenceModel, ChatTokenizer]:
    """The model (in eval mode, weights cast to ``dtype``) and tokenizer of ``model_dir``:
    ``MoETransformer`` or ``HybridMoETransformer``, as config.json's ``model_type`` says.

    With ``verify``, files are checked against SHA256SUMS when the directory has one.
    """
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise ModelDirError(f"model directory {model_dir} does not exist")
    missing = [name for name in REQUIRED_FILES if not (model_dir / name).is_file()]
    if missing:
        raise ModelDirError(f"model directory {model_dir} lacks {', '.join(missing)}")
    if verify and (model_dir / CHECKSUMS_FILE).is_file():
        verify_model_dir(model_dir)

    try:
        hf_config = json.loads((model_dir / CONFIG_FILE).read_text())
    except ValueError as e:
        raise ModelDirError(f"{model_dir / CONFIG_FILE} is not valid JSON: {e}") from e
    if not isinstance(hf_config, dict):
        raise ModelDirError(f"{model_dir / CONFIG_FILE} is not a JSON object")
    arch = model_architecture(model_dir, hf_config)
    model: ReferenceModel
    try:
        if arch.config is HybridConfig:
            model = HybridMoETransformer(HybridConfig.from_hf(hf_config))
        else:
            model = MoETransformer(MoEConfig.from_hf(hf_config))
    except (KeyError, ValueError, TypeError) as e:
        raise ModelDirError(f"{model_dir / CONFIG_FILE} is not a valid config: {e!r}") from e
    state = _load_weights(model_dir)
    try:
        missing_keys, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as e:  # a shape differs from the config's
        raise ModelDirError(f"{model_dir / WEIGHTS_FILE} does not match {CONFIG_FILE}: {e}") from e
    if missing_keys or unexpected:
        raise ModelDirError(
            f"{model_dir / WEIGHTS_FILE} does not match {CONFIG_FILE}: "
            f"missing {sorted(missing_keys)[:5]}, unexpected {sorted(unexpected)[:5]}"
        )
    model.to(dtype).eval()
    return model, ChatTokenizer.from_dir(model_dir)


def load_mixtral_dir(
    model_dir: Path, dtype: torch.dtype = torch.float32, verify: bool = True
) -> tuple[MoETransformer, ChatTokenizer]:
    """``load_model_dir`` for callers that drive ``MoETransformer`` only (the training
    suite, the memory planner's checks): ``ModelDirError`` for any other architecture."""
    model, tokenizer = load_model_dir(model_dir, dtype, verify)
    if not isinstance(model, MoETransformer):
        raise ModelDirError(
            f"model directory {Path(model_dir)} holds a {type(model).__name__}; "
            "this needs mixtral (MixtralForCausalLM)"
        )
    return model, tokenizer
