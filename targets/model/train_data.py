"""Training text as tokens: whole documents held out for evaluation, each side's token
stream, and random windows of it as a batch.

Apart from the loop (``train``) because the trainer (targets.training) builds its token
stream the same way, from the same held-out split.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from moeperf.targets.model.corpus import Corpus
from moeperf.targets.model.tokenizer import ChatTokenizer


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
