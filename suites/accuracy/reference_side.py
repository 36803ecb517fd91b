"""The reference side: Hugging Face transformers loading the model directory (any
Mixtral-style causal LM it can load), float32 on the CPU, teacher-forced on the target's
own tokens.

One forward per prompt over the prompt and the target's output gives, at every output
position, the reference's distribution given exactly the prefix the target had (the
prompt and the target's own previous tokens); log-softmax is taken in float64, so the
mass outside a few tokens is not lost to rounding. The held-out text is scored the same
way, each token given the ones before it.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from moeperf.collectors.accuracy_records import ReferenceSide
from moeperf.suites.errors import UsageError

DTYPE = "float32"
DEVICE = "cpu"


class ReferenceLoadError(UsageError):
    """transformers cannot load the reference model directory (exit 2)."""


@dataclass(frozen=True, slots=True)
class ReferencePosition:
    """The reference at one output position, against the target's token and top-k."""

    argmax: int
    chosen_logprob: float  # of the target's token
    top_logprobs: tuple[float, ...]  # at the target's top-k ids, in their order
    other_mass: float  # probability outside those ids (1 when the target gave none)


def _transformers() -> Any:
    try:
        import transformers
    except ImportError as exc:
        raise ReferenceLoadError(
            f"the accuracy suite runs the reference with Hugging Face transformers, which is "
            f"not installed ({exc}); install it with: pip install '.[accuracy]'"
        ) from None
    transformers.logging.set_verbosity_error()  # its load report lists the MTP keys
    transformers.utils.logging.disable_progress_bar()
    return transformers


class ReferenceModel:
    """The model directory as transformers runs it: float32, CPU, eval mode."""

    def __init__(self, model_dir: Path, threads: int) -> None:
        transformers = _transformers()
        self.model_dir = model_dir
        self.threads = threads
        torch.set_num_threads(threads)
        what = "tokenizer"
        try:
            self.tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
            what = "model"
            model = transformers.AutoModelForCausalLM.from_pretrained(
                model_dir, dtype=torch.float32
            )
        except Exception as exc:
            raise ReferenceLoadError(
                f"reference.model_dir: transformers {transformers.__version__} cannot load "
                f"the {what} of {model_dir}: {type(exc).__name__}: {exc}"
            ) from None
        self.model = model.to(DEVICE).eval()
        self.implementation = (
            f"transformers {importlib.metadata.version('transformers')} {type(self.model).__name__}"
        )

    def describe(self) -> ReferenceSide:
        return ReferenceSide(str(self.model_dir), self.implementation, DTYPE, DEVICE, self.threads)

    def tokenize(self, text: str) -> list[int]:
        """The tokenizer's ids for ``text``, with its own special tokens (a BOS where the
        model wants one), as a server tokenizes a text prompt."""
        return list(self.tokenizer.encode(text))

    def _log_probs(self, ids: Sequence[int]) -> torch.Tensor:
        """[len(ids), V] float64: row p is log P(token p + 1 | tokens 0..p)."""
        with torch.inference_mode():
            logits = self.model(torch.tensor([list(ids)])).logits[0]
        return torch.log_softmax(logits.double(), dim=-1)

    def score_output(
        self,
        prompt: Sequence[int],
        output: Sequence[int],
        top_ids: Sequence[Sequence[int]] | None,
    ) -> list[ReferencePosition]:
        """Teacher-forced: at output position i, the reference given ``prompt`` and
        ``output[:i]``, against ``output[i]`` and the target's top ids there."""
        if not output:
            return []
        rows = self._log_probs([*prompt, *output[:-1]])[len(prompt) - 1 :]  # [n, V]
        positions = []
        for i, token in enumerate(output):
            row = rows[i]
            ids = torch.tensor(list(top_ids[i]) if top_ids is not None else [], dtype=torch.long)
            top = row[ids]
            # The mass outside, summed where it is (not 1 minus a sum near 1).
            outside = torch.ones_like(row, dtype=torch.bool)
            outside[ids] = False
            other = float(torch.exp(row[outside]).sum())
            positions.append(
                ReferencePosition(
                    argmax=int(row.argmax()),
                    chosen_logprob=float(row[token]),
                    top_logprobs=tuple(top.tolist()),
                    other_mass=other,
                )
            )
        return positions

    def text_logprobs(self, ids: Sequence[int]) -> list[float]:
        """log P(token j | tokens before it) for tokens 2..N of ``ids``."""
        rows = self._log_probs(ids)[:-1]
        return rows.gather(1, torch.tensor(list(ids[1:]))[:, None])[:, 0].tolist()
