"""Train the tiny MoE on the standard library's prose, and write a model directory.

nanoGPT's loop: random windows of the token stream, AdamW with linear warmup and cosine
decay, gradient clipping, a held-out evaluation every few steps. The main model and the MTP
module train together (DeepSeek-V3: loss + lambda * mtp_loss, lambda = 0.3 early in training),
with the Switch Transformer load-balancing loss keeping the experts in use.

    moeperf target train --out DIR [--arch {mixtral,hybrid}] [--steps N] [--quick]

``--arch`` picks the model: ``mixtral`` (``MoETransformer``, the default) or ``hybrid``
(``HybridMoETransformer``, Qwen3-Next's Gated DeltaNet + gated attention + shared expert).
"""

from __future__ import annotations

import argparse
import math
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from moeperf.targets.model.checkpoint import ARCHITECTURES, ReferenceModel, save_model_dir
from moeperf.targets.model.config import MoEConfig
from moeperf.targets.model.corpus import Corpus, load_corpus
from moeperf.targets.model.hybrid import HybridMoETransformer
from moeperf.targets.model.hybrid_config import HybridConfig
from moeperf.targets.model.model import MoETransformer, causal_attention
from moeperf.targets.model.tokenizer import ChatTokenizer, train_tokenizer

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}

ModelConfig = MoEConfig | HybridConfig


def build_model(config: ModelConfig) -> ReferenceModel:
    """The model a config describes: ``MoETransformer`` or ``HybridMoETransformer``."""
    if isinstance(config, HybridConfig):
        return HybridMoETransformer(config)
    return MoETransformer(config)


def architecture(config: ModelConfig) -> str:
    """The config.json ``model_type`` of the model ``config`` builds ("mixtral" or
    "qwen3_next"): recipe.json's recipe.model.architecture."""
    return next(a.model_type for a in ARCHITECTURES.values() if a.config is type(config))


@dataclass(frozen=True)
class TrainRecipe:
    model: ModelConfig = field(default_factory=lambda: MoEConfig(mtp_depth=1))
    seq_len: int = 256
    batch_size: int = 16  # sequences per step
    steps: int = 900
    lr: float = 2e-3  # peak; tiny models take a higher rate than GPT-3's 6e-4
    warmup_steps: int = 50
    min_lr_ratio: float = 0.1  # cosine decays to lr * this (Chinchilla's 10x)
    weight_decay: float = 0.1  # on matrices only, not norms (nanoGPT)
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float = 1.0
    mtp_loss_weight: float = 0.3  # DeepSeek-V3's lambda for its first 10T tokens
    aux_loss_weight: float = 0.01  # Switch Transformer's alpha
    eval_fraction: float = 0.02  # of the documents, held out
    eval_every: int = 100  # steps
    log_every: int = 10  # steps between short progress lines
    eval_windows: int = 64  # most seq_len windows of held-out text per evaluation
    seed: int = 1337
    threads: int = 2  # torch intra-op threads
    dtype: str = "float32"

    def __post_init__(self) -> None:
        positive = ("seq_len", "batch_size", "steps", "eval_every", "log_every", "eval_windows")
        problems = [
            f"{name} must be >= 1" for name in (*positive, "threads") if getattr(self, name) < 1
        ]
        if self.seq_len > self.model.max_position:
            problems.append("seq_len must be <= model.max_position")
        if not 0 < self.eval_fraction < 0.5:
            problems.append("eval_fraction must be in (0, 0.5)")
        if self.dtype not in DTYPES:
            problems.append(f"dtype must be one of {sorted(DTYPES)}")
        if problems:
            raise ValueError("; ".join(problems))


# A model small enough to train in seconds: for smoke tests, not for serving.
QUICK_RECIPE = TrainRecipe(
    model=MoEConfig(
        vocab_size=1024,
        hidden_size=64,
        expert_hidden_size=64,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        num_experts=4,
        top_k=2,
        max_position=256,
        mtp_depth=1,
    ),
    seq_len=64,
    batch_size=8,
    steps=30,
    lr=3e-3,
    warmup_steps=5,
    eval_every=10,
    eval_windows=16,
)

# The hybrid (Qwen3-Next) reference model: HybridConfig()'s shape, TrainRecipe's schedule.
HYBRID_RECIPE = TrainRecipe(model=HybridConfig())

# Its smoke-test size: two linear-attention layers and one full-attention layer (interval 3,
# so the last layer is full attention), trains in seconds.
QUICK_HYBRID_CONFIG = HybridConfig(
    vocab_size=1024,
    hidden_size=64,
    num_layers=3,
    full_attention_interval=3,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    partial_rotary_factor=0.25,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=16,
    linear_value_head_dim=16,
    num_experts=4,
    top_k=2,
    expert_hidden_size=64,
    shared_expert_hidden_size=64,
    max_position=256,
    mtp_depth=1,
)
QUICK_HYBRID_RECIPE = replace(QUICK_RECIPE, model=QUICK_HYBRID_CONFIG)

# --arch -> (full recipe, --quick recipe)
BASE_RECIPES = {
    "mixtral": (TrainRecipe(), QUICK_RECIPE),
    "hybrid": (HYBRID_RECIPE, QUICK_HYBRID_RECIPE),
}


def lr_at(step: int, recipe: TrainRecipe) -> float:
    """Linear warmup to ``lr``, then cosine decay to ``lr * min_lr_ratio`` at the last step."""
    if step < recipe.warmup_steps:
        return recipe.lr * (step + 1) / recipe.warmup_steps
    progress = (step - recipe.warmup_steps) / max(recipe.steps - recipe.warmup_steps, 1)
    min_lr = recipe.lr * recipe.min_lr_ratio
    return min_lr + 0.5 * (recipe.lr - min_lr) * (1 + math.cos(math.pi * min(progress, 1.0)))


def split_documents(corpus: Corpus, eval_fraction: float) -> tuple[list[str], list[str]]:
    """Whole documents held out, spread over the corpus: a document goes to the held-out
    side whenever that side holds less than ``eval_fraction`` of the text seen so far. Whole
    documents, so no held-out window shares text with a training window."""
    train: list[str] = []
    held_out: list[str] = []
    seen_chars = held_chars = 0
    for doc in corpus.documents:
        if held_chars < eval_fraction * seen_chars:
            held_out.append(doc)
            held_chars += len(doc)
        else:
            train.append(doc)
        seen_chars += len(doc)
    return train, held_out


def token_stream(documents: Sequence[str], tokenizer: ChatTokenizer) -> Tensor:
    """The documents' tokens, each document followed by EOS, as one int64 ``[N]`` tensor."""
    ids: list[int] = []
    for doc_ids in tokenizer.encode_batch(documents):
        ids += doc_ids
        ids.append(tokenizer.eos_token_id)
    return torch.tensor(ids, dtype=torch.long)


def random_batch(
    stream: Tensor, batch_size: int, seq_len: int, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """``batch_size`` random windows: inputs ``[B, T]`` and the next tokens ``[B, T]``."""
    starts = torch.randint(len(stream) - seq_len - 1, (batch_size,), generator=generator)
    windows = torch.stack([stream[s : s + seq_len + 1] for s in starts.tolist()])
    return windows[:, :-1], windows[:, 1:]


@torch.no_grad()
def evaluate(model: ReferenceModel, stream: Tensor, recipe: TrainRecipe) -> dict[str, float]:
    """Held-out losses and top-1 accuracies over consecutive, non-overlapping windows.

    ``mtp_top1_agreement`` is how often the MTP module's top token equals the main model's
    at the same position: the acceptance rate of one greedy draft token in speculative
    decoding. Position 0 is left out of the MTP numbers (its h_prev is zeros, which serving
    never feeds).
    """
    model.eval()
    t = recipe.seq_len
    num_windows = min(recipe.eval_windows, (len(stream) - 1) // t)
    windows = torch.stack([stream[i * t : i * t + t + 1] for i in range(num_windows)])
    totals = dict.fromkeys(("loss", "mtp_loss", "top1", "mtp_top1", "mtp_agree"), 0.0)
    batches = windows.split(recipe.batch_size)
    for batch in batches:
        x, y = batch[:, :-1], batch[:, 1:]
        out = model(x, y)
        main_pred = out.logits.argmax(-1)
        totals["loss"] += out.loss.item()
        totals["top1"] += (main_pred == y).float().mean().item()
        if model.config.mtp_depth:
            mtp_pred = _mtp_logits(model, x, out.hidden).argmax(-1)[:, 1:]
            totals["mtp_loss"] += out.mtp_loss.item()
            totals["mtp_top1"] += (mtp_pred == y[:, 1:]).float().mean().item()
            totals["mtp_agree"] += (mtp_pred == main_pred[:, 1:]).float().mean().item()
    model.train()
    n = len(batches)
    result = {
        "eval_loss": totals["loss"] / n,
        "eval_top1_accuracy": totals["top1"] / n,
        "eval_tokens": num_windows * t,
    }
    if model.config.mtp_depth:
        result |= {
            "eval_mtp_loss": totals["mtp_loss"] / n,
            "eval_mtp_top1_accuracy": totals["mtp_top1"] / n,
            "eval_mtp_top1_agreement": totals["mtp_agree"] / n,
        }
    return result


def _mtp_logits(model: ReferenceModel, idx: Tensor, hidden: Tensor) -> Tensor:
    """MTP module 0's logits ``[B, T, V]`` as ``MoETransformer.forward`` computes its loss:
    entry t from h_{t-1} and token t."""
    batch, seq_len = idx.shape
    h_prev = torch.cat([torch.zeros_like(hidden[:, :1]), hidden[:, :-1]], dim=1).flatten(0, 1)
    positions = torch.arange(seq_len).repeat(batch)
    attend = causal_attention(batch, seq_len)
    mtp_hidden = model.mtp_forward(0, h_prev, idx.flatten(), positions, attend)
    return model.mtp_logits(0, mtp_hidden).view(batch, seq_len, -1)


def make_optimizer(model: ReferenceModel, recipe: TrainRecipe) -> torch.optim.AdamW:
    """AdamW, decaying matrices and embeddings but not norm weights (nanoGPT)."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": recipe.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=recipe.lr, betas=recipe.betas)


@dataclass
class TrainResult:
    model: ReferenceModel
    tokenizer: ChatTokenizer
    summary: dict[str, Any]  # recipe, corpus, final and per-evaluation losses, times


def train(recipe: TrainRecipe, log: Callable[[str], None] = print) -> TrainResult:
    """Train a tokenizer, then a model, from ``recipe``."""
    threads_before = torch.get_num_threads()
    torch.set_num_threads(recipe.threads)
    try:
        return _train(recipe, log)
    finally:  # the setting is process-wide: leave it as the caller had it
        torch.set_num_threads(threads_before)


def _train(recipe: TrainRecipe, log: Callable[[str], None]) -> TrainResult:
    started_s = time.perf_counter()
    corpus = load_corpus()
    train_docs, eval_docs = split_documents(corpus, recipe.eval_fraction)
    tokenizer = train_tokenizer(train_docs, recipe.model.vocab_size, recipe.model.max_position)
    train_ids, eval_ids = token_stream(train_docs, tokenizer), token_stream(eval_docs, tokenizer)
    log(
        f"corpus: {len(corpus.documents)} documents, {corpus.num_chars:,} chars, "
        f"{len(train_ids):,} train / {len(eval_ids):,} held-out tokens "
        f"(sha256 {corpus.sha256[:12]})"
    )

    torch.manual_seed(recipe.seed)
    model = build_model(recipe.model).to(DTYPES[recipe.dtype])
    model.train()
    optimizer = make_optimizer(model, recipe)
    generator = torch.Generator().manual_seed(recipe.seed)
    log(
        f"model: {architecture(recipe.model)} ({type(model).__name__}), "
        f"{sum(p.numel() for p in model.parameters()):,} parameters"
    )

    history: list[dict[str, float]] = []
    recent: list[tuple[float, float]] = []  # (loss, mtp_loss) since the last report
    train_started_s = time.perf_counter()
    for step in range(recipe.steps):
        lr = lr_at(step, recipe)
        for group in optimizer.param_groups:
            group["lr"] = lr
        x, y = random_batch(train_ids, recipe.batch_size, recipe.seq_len, generator)
        out = model(x, y)
        mtp_loss = out.mtp_loss if out.mtp_loss is not None else torch.zeros(())
        loss = out.loss + recipe.mtp_loss_weight * mtp_loss + recipe.aux_loss_weight * out.aux_loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.grad_clip)
        optimizer.step()
        recent.append((out.loss.item(), mtp_loss.item()))

        last = step == recipe.steps - 1
        if (step + 1) % recipe.log_every == 0 and (step + 1) % recipe.eval_every and not last:
            elapsed_s = time.perf_counter() - train_started_s
            log(f"step {step + 1:5d}/{recipe.steps} loss {recent[-1][0]:.3f} {elapsed_s:.0f}s")
        if (step + 1) % recipe.eval_every == 0 or last:
            elapsed_s = time.perf_counter() - train_started_s
            point = {
                "step": step + 1,
                "lr": lr,
                "train_loss": sum(r[0] for r in recent) / len(recent),
                "train_mtp_loss": sum(r[1] for r in recent) / len(recent),
                **evaluate(model, eval_ids, recipe),
                "elapsed_s": round(elapsed_s, 1),
            }
            history.append(point)
            recent.clear()
            tokens_per_s = (step + 1) * recipe.batch_size * recipe.seq_len / elapsed_s
            log(
                f"step {step + 1:5d}/{recipe.steps} lr {lr:.2e} "
                f"train {point['train_loss']:.3f} (mtp {point['train_mtp_loss']:.3f}) "
                f"eval {point['eval_loss']:.3f} (mtp {point.get('eval_mtp_loss', 0.0):.3f}, "
                f"agree {point.get('eval_mtp_top1_agreement', 0.0):.2f}) "
                f"{tokens_per_s:,.0f} tok/s {elapsed_s:.0f}s"
            )

    train_time_s = time.perf_counter() - train_started_s
    summary = {
        "recipe": recipe_dict(recipe),
        "corpus": {
            "source": "pydoc_data.topics + stdlib docstrings (targets.model.corpus)",
            "sha256": corpus.sha256,
            "python_version": corpus.python_version,
            "documents": len(corpus.documents),
            "chars": corpus.num_chars,
            "train_tokens": len(train_ids),
            "eval_tokens": len(eval_ids),
        },
        "final": history[-1],
        "train_time_s": round(train_time_s, 1),
        "total_time_s": round(time.perf_counter() - started_s, 1),
        "tokens_seen": recipe.steps * recipe.batch_size * recipe.seq_len,
        "history": history,
    }
    model.eval()
    return TrainResult(model, tokenizer, summary)


def recipe_dict(recipe: TrainRecipe) -> dict[str, Any]:
    """recipe.json's "recipe": the fields, with the model's architecture (its config.json
    ``model_type``) first in "model"."""
    data = asdict(recipe)
    data["model"] = {"architecture": architecture(recipe.model), **data["model"]}
    return data


def train_model(
    recipe: TrainRecipe,
    out_dir: Path,
    log: Callable[[str], None] = print,
    command: str | None = None,
) -> dict[str, Any]:
    """Train from ``recipe`` and write the model directory. ``command`` (the command line
    that recreates it) is recorded in recipe.json. Returns recipe.json's summary."""
    result = train(recipe, log)
    summary = {"command": command, **result.summary}
    save_model_dir(result.model, result.tokenizer, Path(out_dir), summary)
    log(f"wrote {out_dir}")
    return summary


# TrainRecipe fields the command line can set (argparse's dest names match them).
CLI_OVERRIDES = ("steps", "batch_size", "seq_len", "lr", "warmup_steps", "eval_every", "threads",
                 "seed")  # fmt: skip


PROG = "python -m moeperf.targets.model.train"


def parse_args(argv: Sequence[str] | None, prog: str = PROG) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    parser.add_argument("--out", type=Path, required=True, help="model directory to write")
    parser.add_argument(
        "--arch",
        choices=list(BASE_RECIPES),
        default="mixtral",
        help="mixtral: MoETransformer (the default model); hybrid: HybridMoETransformer "
        "(Qwen3-Next: Gated DeltaNet, gated attention, shared expert)",
    )
    parser.add_argument("--quick", action="store_true", help="a tiny model for a smoke test")
    parser.add_argument("--steps", type=int, help="optimizer steps")
    parser.add_argument("--batch-size", type=int, help="sequences per step")
    parser.add_argument("--seq-len", type=int, help="tokens per sequence")
    parser.add_argument("--lr", type=float, help="peak learning rate")
    parser.add_argument("--warmup-steps", type=int)
    parser.add_argument("--eval-every", type=int, help="steps between evaluations")
    parser.add_argument("--threads", type=int, help="torch intra-op threads")
    parser.add_argument("--seed", type=int)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(args_list, prog)
    full, quick = BASE_RECIPES[args.arch]
    base = quick if args.quick else full
    overrides = {
        name: value for name in CLI_OVERRIDES if (value := getattr(args, name)) is not None
    }
    try:
        recipe = replace(base, **overrides)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    command = shlex.join(["python", "-m", "moeperf.targets.model.train", *args_list])
    train_model(recipe, args.out, command=command)
    return 0


if __name__ == "__main__":
    sys.exit(main())
