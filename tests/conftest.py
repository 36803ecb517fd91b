"""Fixtures shared across the test packages."""

import asyncio
import inspect
import json
import random
import socket
import textwrap
from pathlib import Path

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

SPECIAL_TOKEN = "<|endoftext|>"


def english_corpus() -> list[str]:
    """Docstrings of a few stdlib modules, plus some non-ASCII text."""
    texts = ["Café naïve 東京 — ünïcödé ✓ résumé"]
    for module in (json, random, textwrap, inspect, asyncio):
        texts += [d for _, obj in inspect.getmembers(module) if (d := inspect.getdoc(obj))]
    return texts


@pytest.fixture(scope="session")
def tiny_bpe_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Hugging Face tokenizer directory: a byte-level BPE with a ~500-token vocabulary."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=True)
    trainer = trainers.BpeTrainer(
        vocab_size=500,
        special_tokens=[SPECIAL_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(english_corpus(), trainer)
    path = tmp_path_factory.mktemp("tiny_bpe")
    tok.save(str(path / "tokenizer.json"))
    return path


@pytest.fixture
def unused_tcp_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
