"""Hugging Face ``transformers serve`` as a target: the third-party server moeperf is
checked against (tests/e2e/test_transformers_serve.py) and compared with
(``benchmarks/versus.py``).

It is started the way a user would start it, from the ``transformers`` console script of
the running interpreter's environment, on 127.0.0.1 and on CPU, serving a local model
directory with continuous batching and a bounded paged KV cache (``--cb-num-blocks``
blocks of ``--cb-block-size`` tokens). It prints no ready line of its own, so readiness
is its ``GET /health`` answering 200.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from server_process import ServerNotReady, serving

READY_TIMEOUT_S = 180.0


@dataclass(frozen=True)
class TransformersServe:
    """How to start it: the model directory and the continuous-batching cache."""

    model_dir: Path
    cb_block_size: int = 32
    # 64 blocks of 32 tokens: 2,048 tokens of KV cache, 16 requests of 128 + 64 tokens
    # fit with room to spare; a larger cache would only take memory on a small host.
    cb_num_blocks: int = 64
    cb_max_batch_tokens: int = 512
    # torch's intra-op threads (OMP_NUM_THREADS, read by torch at start); None: its default.
    threads: int | None = None


def executable() -> str:
    """The ``transformers`` console script beside this interpreter (a venv's), else PATH's."""
    beside = Path(sys.executable).parent / "transformers"
    found = str(beside) if beside.exists() else shutil.which("transformers")
    if found is None:
        raise ServerNotReady(
            "no `transformers` command: install transformers[serving] (the test extra pins it)"
        )
    return found


def command(server: TransformersServe, port: int) -> list[str]:
    return [
        executable(),
        "serve",
        str(server.model_dir),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--device",
        "cpu",
        "--continuous-batching",
        "--cb-block-size",
        str(server.cb_block_size),
        "--cb-num-blocks",
        str(server.cb_num_blocks),
        "--cb-max-batch-tokens",
        str(server.cb_max_batch_tokens),
    ]


def _environment(server: TransformersServe) -> dict[str, str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if server.threads is not None:
        env["OMP_NUM_THREADS"] = str(server.threads)
    return env


@contextmanager
def running(server: TransformersServe, timeout_s: float = READY_TIMEOUT_S) -> Iterator[str]:
    """Start the server, yield its base URL once /health answers, stop it at the end."""
    with serving(
        "transformers serve", lambda port: command(server, port), _environment(server), timeout_s
    ) as url:
        yield url
