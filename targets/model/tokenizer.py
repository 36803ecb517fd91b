"""The model's tokenizer: a byte-level BPE, saved in Hugging Face's format.

Byte-level (GPT-2's scheme) so every string encodes and ``decode(encode(x)) == x``. The
special tokens come first, in the order ``MoEConfig`` expects (pad 0, bos 1, eos 2), then the
chat roles. The directory it writes loads with ``transformers.AutoTokenizer``; this module
reads it back with ``tokenizers`` and ``jinja2`` alone, which is all the serving engine needs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

if TYPE_CHECKING:  # jinja2 is imported where a template is compiled (see _compile)
    from jinja2 import Template

PAD, BOS, EOS = "<pad>", "<s>", "</s>"
SYSTEM, USER, ASSISTANT, END = "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"
SPECIAL_TOKENS = (PAD, BOS, EOS, SYSTEM, USER, ASSISTANT, END)  # ids 0..6, in this order

TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"

# Each message as "<|role|>\n{content}<|end|>\n"; the generation prompt opens the assistant's
# turn. trim_blocks/lstrip_blocks as transformers compiles templates, so both render the same.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] + '<|end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)


class ChatTokenizer:
    """Encode, decode and chat-format text for the model (no transformers needed)."""

    def __init__(
        self, tokenizer: Tokenizer, chat_template: str = CHAT_TEMPLATE, model_max_length: int = 2048
    ):
        self.tokenizer = tokenizer
        self.chat_template = chat_template
        self.model_max_length = model_max_length
        found = [tokenizer.token_to_id(t) for t in SPECIAL_TOKENS]  # None: not in the vocab
        ids = [i for i in found if i is not None]
        if ids != list(range(len(SPECIAL_TOKENS))):
            raise ValueError(f"special tokens {SPECIAL_TOKENS} must have ids 0.., not {found}")
        self.pad_token_id, self.bos_token_id, self.eos_token_id = ids[0], ids[1], ids[2]
        self.end_token_id = ids[SPECIAL_TOKENS.index(END)]

    @cached_property
    def _template(self) -> Template:  # compiled on first use
        return _compile(self.chat_template)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    @property
    def stop_token_ids(self) -> tuple[int, ...]:
        """Tokens that end a generation: end of document, and end of a chat turn."""
        return (self.eos_token_id, self.end_token_id)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``; special-token strings in it become their ids. No BOS."""
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """``encode`` of many texts, in parallel threads (the tokenizers library's)."""
        return [e.ids for e in self.tokenizer.encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def render_chat(
        self, messages: Sequence[Mapping[str, str]], add_generation_prompt: bool = True
    ) -> str:
        """The chat template's text for ``messages`` (``{"role": ..., "content": ...}``)."""
        return self._template.render(
            messages=list(messages),
            add_generation_prompt=add_generation_prompt,
            bos_token=BOS,
            eos_token=EOS,
        )

    def apply_chat_template(
        self, messages: Sequence[Mapping[str, str]], add_generation_prompt: bool = True
    ) -> list[int]:
        """Token ids of the rendered chat, as ``AutoTokenizer.apply_chat_template`` gives."""
        return self.encode(self.render_chat(messages, add_generation_prompt))

    def save(self, out_dir: Path) -> list[Path]:
        """Write ``tokenizer.json`` and ``tokenizer_config.json``; returns their paths."""
        out_dir = Path(out_dir)
        tok_path, config_path = out_dir / TOKENIZER_FILE, out_dir / TOKENIZER_CONFIG_FILE
        self.tokenizer.save(str(tok_path))
        config = {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": BOS,
            "eos_token": EOS,
            "pad_token": PAD,
            "model_max_length": self.model_max_length,
            "add_bos_token": False,
            "add_eos_token": False,
            "clean_up_tokenization_spaces": False,  # would break decode(encode(x)) == x
            "chat_template": self.chat_template,
        }
        config_path.write_text(json.dumps(config, indent=2) + "\n")
        return [tok_path, config_path]

    @classmethod
    def from_dir(cls, model_dir: Path) -> ChatTokenizer:
        """Read a directory written by ``save`` (or any with the same special tokens)."""
        model_dir = Path(model_dir)
        config = json.loads((model_dir / TOKENIZER_CONFIG_FILE).read_text())
        return cls(
            Tokenizer.from_file(str(model_dir / TOKENIZER_FILE)),
            chat_template=config.get("chat_template", CHAT_TEMPLATE),
            model_max_length=config.get("model_max_length", 2048),
        )


def _compile(template: str) -> Template:
    # jinja2 comes with transformers; imported here so encode/decode work without it.
    # The environment is the one transformers compiles chat templates in.
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(template)


def train_tokenizer(
    documents: Iterable[str], vocab_size: int = 4096, model_max_length: int = 2048
) -> ChatTokenizer:
    """Train a byte-level BPE of ``vocab_size`` tokens (special tokens included)."""
    tok = Tokenizer(models.BPE())
    # No prefix space: a leading space would break decode(encode(x)) == x.
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # all 256 bytes, seen or not
        show_progress=False,
    )
    tok.train_from_iterator(documents, trainer)
    return ChatTokenizer(tok, model_max_length=model_max_length)
