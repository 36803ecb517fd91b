"""Look at what a model directory says: greedy continuation of a prompt.

    python -m moeperf.targets.model [--dir DIR] [--max-tokens N] [--chat] PROMPT

No KV cache: each token reruns the whole sequence, which is fine at this size (the serving
engine is the fast path). Training is ``python -m moeperf.targets.model.train``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from moeperf.targets.model.checkpoint import (
    ModelDirError,
    ReferenceModel,
    default_model_dir,
    load_model_dir,
)


@torch.no_grad()
def greedy_generate(
    model: ReferenceModel, prompt_ids: Sequence[int], max_new_tokens: int, stop_ids: Sequence[int]
) -> list[int]:
    """The most likely next token, ``max_new_tokens`` times or until a stop token (kept)."""
    ids = list(prompt_ids)
    new: list[int] = []
    for _ in range(max_new_tokens):
        window = ids[-model.config.max_position :]
        next_id = int(model(torch.tensor([window])).logits[0, -1].argmax())
        ids.append(next_id)
        new.append(next_id)
        if next_id in stop_ids:
            break
    return new


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m moeperf.targets.model", description=__doc__)
    parser.add_argument("prompt")
    parser.add_argument("--dir", type=Path, default=default_model_dir(), help="model directory")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--chat", action="store_true", help="wrap the prompt as a user turn")
    args = parser.parse_args(argv)
    if args.max_tokens < 1:
        parser.error("--max-tokens must be >= 1")
    try:
        model, tokenizer = load_model_dir(args.dir)
    except ModelDirError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.chat:
        ids = tokenizer.apply_chat_template([{"role": "user", "content": args.prompt}])
    else:
        ids = tokenizer.encode(args.prompt)  # no BOS: training text has none (EOS separates)
    new = greedy_generate(model, ids, args.max_tokens, tokenizer.stop_token_ids)
    print(tokenizer.decode(ids + new, skip_special_tokens=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
