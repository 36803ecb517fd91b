"""The prompt set and the held-out text, read from the spec's files and tokenized by the
reference's tokenizer.

Both sides see the same token ids: the prompts go to the target as ids (OpenAI's
completions API takes them, as vLLM and SGLang do), so no tokenizer of the target's can
make the two disagree. The shipped set (``suites/specs/accuracy/``) is a dozen short
sentence starts in the style of the Python documentation, and a held-out text of about
400 tokens written for this suite (in no training corpus).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from moeperf.suites.accuracy.spec import PromptsSpec, spec_file
from moeperf.suites.errors import UsageError

Tokenize = Callable[[str], list[int]]


@dataclass(frozen=True, slots=True)
class Prompt:
    prompt_id: str
    text: str
    token_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class PromptSet:
    prompts: tuple[Prompt, ...]
    heldout_text: str
    heldout_ids: tuple[int, ...]
    source: str  # the files, for the manifest


def _read(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"prompts.{what}: cannot read {path}: {exc}") from None


def _prompt(line: str, where: str) -> tuple[str, str]:
    try:
        item = json.loads(line)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{where}: not JSON: {exc}") from None
    if not (isinstance(item, dict) and isinstance(item.get("text"), str) and item["text"]):
        raise UsageError(f'{where}: expected {{"id": "...", "text": "..."}} with a text')
    return str(item.get("id") or where.rsplit(":", 1)[-1]), item["text"]


def load_prompt_set(spec: PromptsSpec, tokenize: Tokenize) -> PromptSet:
    """The spec's prompts and held-out text, tokenized; a ``UsageError`` (exit 2) names a
    file that cannot be read, a bad line, or a text with too few tokens."""
    path = spec_file(spec.file)
    prompts: list[Prompt] = []
    seen: set[str] = set()
    for number, line in enumerate(_read(path, "file").splitlines(), start=1):
        if not line.strip():
            continue
        prompt_id, text = _prompt(line, f"{path}:{number}")
        if prompt_id in seen:
            raise UsageError(f"{path}:{number}: prompt id {prompt_id!r} is used twice")
        seen.add(prompt_id)
        prompts.append(Prompt(prompt_id, text, tuple(tokenize(text))))
    if not prompts:
        raise UsageError(f"prompts.file: {path} holds no prompt")
    heldout_path = spec_file(spec.heldout_file)
    heldout = _read(heldout_path, "heldout_file").strip()
    heldout_ids = tuple(tokenize(heldout))
    if len(heldout_ids) < 2:
        raise UsageError(
            f"prompts.heldout_file: {heldout_path} has {len(heldout_ids)} token(s); a "
            "perplexity needs at least 2"
        )
    return PromptSet(tuple(prompts), heldout, heldout_ids, f"{path}; {heldout_path}")
