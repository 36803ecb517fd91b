"""Fixtures shared across the test packages, and the rules of the two tiers.

The suite runs in three parts (tox.ini's test and fast envs, docs/development/tests.md):
every test not marked ``timing`` across both cores with pytest-xdist; then the ``timing``
tests two at a time, each on a core of its own; then those also marked ``alone`` (they
keep more than one core busy themselves) by themselves. What a timing test measures is
then the machine's, not a busy neighbour's.
"""

import asyncio
import inspect
import json
import os
import random
import socket
import sys
import textwrap
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from moeperf.targets.ready_line import ReadyChild, start_ready

# An xdist worker has one core of its own: torch (and every child process a test starts,
# which inherits this) computes on one thread instead of two workers' four threads
# fighting over two cores. Set before any test module imports torch.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _threads in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_threads, "1")

SPECIAL_TOKEN = "<|endoftext|>"


@pytest.fixture(autouse=True)
def _one_torch_thread_after_each_test() -> Iterator[None]:
    """In an xdist worker, torch back on one thread after every test: a training spec's
    ``threads = 2`` (run in-process by a suite's test) sets it for the whole worker, and
    the tests after it would then spin a second thread beside the other worker's."""
    yield
    if os.environ.get("PYTEST_XDIST_WORKER") and "torch" in sys.modules:
        torch = sys.modules["torch"]
        if torch.get_num_threads() != 1:
            torch.set_num_threads(1)


_deselected_total = 0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # ``alone`` is a kind of ``timing`` test: one marked alone only would run in the
    # parallel part beside a neighbour, the opposite of what it asks.
    stray = [
        i.nodeid
        for i in items
        if i.get_closest_marker("alone") and not i.get_closest_marker("timing")
    ]
    if stray:
        raise pytest.UsageError(f"marked alone but not timing: {', '.join(stray)}")


def pytest_deselected(items: list[pytest.Item]) -> None:
    global _deselected_total
    _deselected_total += len(items)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # A tier whose marker expression selects none of the given tests (say, ``-m timing``
    # on a file with no timing test) has nothing to fail: it passes, as when its tests do.
    if exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED and _deselected_total:
        session.exitstatus = pytest.ExitCode.OK


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


# --- the reference target, as a child process ----------------------------------------------

REPO_ROOT = Path(__file__).resolve().parents[1]
# Importing torch and loading the weights on a busy 2-core machine.
REFERENCE_READY_TIMEOUT_S = 120.0


def _start_reference(config: dict, *flags: str) -> ReadyChild:
    command = [sys.executable, "-m", "moeperf.targets.serving", "--host", "127.0.0.1"]
    command += ["--port", "0", "--config", json.dumps(config), *flags]
    return start_ready(command, timeout_s=REFERENCE_READY_TIMEOUT_S, cwd=REPO_ROOT)


@pytest.fixture(scope="session")
def start_reference() -> Callable[..., ReadyChild]:
    """``start(config, *flags)``: a new ``python -m moeperf.targets.serving`` on 127.0.0.1
    and a free port, once it printed READY; a context manager that stops it (for a test
    that stops or breaks its own server)."""
    return _start_reference


@pytest.fixture(scope="session")
def reference_target() -> Iterator[Callable[..., ReadyChild]]:
    """``server(config, *flags)``: the reference target with that config, started the first
    time a test asks for it and shared by every test of the session that asks for the same
    config (its weights load once); all are stopped when the session ends."""
    with ExitStack() as stack:
        started: dict[str, ReadyChild] = {}

        def server(config: dict, *flags: str) -> ReadyChild:
            key = json.dumps([config, flags], sort_keys=True)
            if key not in started:
                started[key] = stack.enter_context(_start_reference(config, *flags))
            return started[key]

        yield server
