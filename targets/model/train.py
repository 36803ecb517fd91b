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
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from moeperf.targets.model.checkpoint import ReferenceModel, save_model_dir
from moeperf.targets.model.corpus import load_corpus
from moeperf.targets.model.tokenizer import ChatTokenizer, train_tokenizer
from moeperf.targets.model.train_data import random_batch, split_documents, token_stream
from moeperf.targets.model.train_eval import evaluate
from moeperf.targets.model.train_optim import lr_at, make_optimizer
from moeperf.targets.model.train_recipe import (
    BASE_RECIPES,
    DTYPES,
    TrainRecipe,
    architecture,
    build_model,
    recipe_dict,
)


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
