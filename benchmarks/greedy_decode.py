"""``python benchmarks/greedy_decode.py``: why greedy decoding looked slower than
sampling at one stream, and what the KV gather costs.

On the shipped model, greedy outputs never reach EOS (they settle into a loop), so a
request without ``ignore_eos`` runs to ``max_tokens``, while sampled ones stop at EOS
sooner; and a decode step's cost grows with its context. This script measures both, on
the engine directly (no HTTP), one torch thread, side by side in one run:

1. output lengths of greedy and sampled requests (EOS on, ``max_tokens`` 1,500), and the
   time per output token of each;
2. the time per output token at a fixed context (64, 512, 1,024 and 1,900 prompt tokens,
   64 output tokens, ``ignore_eos``), greedy and sampled, with the KV cache gathered by
   ``index_select`` (the engine's) and by advanced indexing (what it did before).

Times are medians over repeats of engine-thread CPU time (``time.thread_time``), which
other processes on the host do not inflate; wall time is printed beside it.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch
from rich.console import Console
from rich.table import Table
from torch import Tensor

from moeperf.targets.model.checkpoint import default_model_dir, load_model_dir
from moeperf.targets.serving.engine import paged_attention
from moeperf.targets.serving.engine.api import EngineConfig, SamplingParams
from moeperf.targets.serving.engine.engine import Engine

QUESTIONS = (
    "How do I sort a list of tuples by the second item?",
    "What does len() return for a dict?",
    "Explain list comprehensions.",
    "Why does my loop never end?",
)
CONTEXTS = (64, 512, 1024, 1900)
REPEATS = 5


def _advanced_index(cache: Tensor, slots: Tensor) -> Tensor:
    return cache[slots]


def _timed(engine: Engine, prompt: list[int], params: SamplingParams) -> tuple[int, float, float]:
    wall, cpu = time.perf_counter(), time.thread_time()
    (out,) = engine.generate([prompt], params)
    return len(out), time.thread_time() - cpu, time.perf_counter() - wall


def _gather_us(
    gather: Callable[[Tensor, Tensor], Tensor], cache: Tensor, slots: Tensor, calls: int = 200
) -> float:
    gather(cache, slots)
    cpu = time.thread_time()
    for _ in range(calls):
        gather(cache, slots)
    return (time.thread_time() - cpu) / calls * 1e6


def main() -> None:
    torch.set_num_threads(1)
    model, tokenizer = load_model_dir(default_model_dir())
    console = Console()
    engine = Engine(model, EngineConfig(enable_prefix_caching=False, threads=1))
    lengths = Table(title="EOS on, max_tokens 1,500: output tokens and ms per output token")
    for column in ("mode", "output tokens per request", "CPU ms/token", "wall ms/token"):
        lengths.add_column(column, justify="right")
    for temperature, mode in ((0.0, "greedy"), (1.0, "sampled")):
        runs = [
            _timed(engine, tokenizer.encode(q), SamplingParams(1500, temperature, seed=i))
            for i, q in enumerate(QUESTIONS)
        ]
        lengths.add_row(
            mode,
            " ".join(str(n) for n, _, _ in runs),
            f"{statistics.median(c / n * 1e3 for n, c, _ in runs):.2f}",
            f"{statistics.median(w / n * 1e3 for n, _, w in runs):.2f}",
        )
    console.print(lengths)
    gathers: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
        "index_select": paged_attention._gather,
        "advanced indexing": _advanced_index,
    }
    fixed = Table(
        title=f"64 output tokens at a fixed context: CPU ms per decode token (median of "
        f"{REPEATS}, interleaved), and the gather alone"
    )
    fixed.add_column("prompt tokens", justify="right")
    for name in gathers:
        for mode in ("greedy", "sampled"):
            fixed.add_column(f"{mode}, {name}", justify="right")
    fixed.add_column("one K gather: index_select / advanced, us", justify="right")
    cache = engine.cache.k[0]
    try:
        for context in CONTEXTS:
            prompt = [5 + (i * 7) % 4000 for i in range(context)]
            cells: dict[tuple[str, float], list[float]] = {}
            for _ in range(REPEATS):  # every cell once per round: drift hits all alike
                for name, gather in gathers.items():
                    paged_attention._gather = gather  # type: ignore[assignment]
                    for temperature in (0.0, 1.0):
                        decode = SamplingParams(65, temperature, seed=0, ignore_eos=True)
                        _, prefill_cpu, _ = _timed(engine, prompt, SamplingParams(1, temperature))
                        _, total_cpu, _ = _timed(engine, prompt, decode)
                        cells.setdefault((name, temperature), []).append(
                            (total_cpu - prefill_cpu) / 64 * 1e3
                        )
            slots = torch.arange(context)[None]
            gather_us = [_gather_us(g, cache, slots) for g in gathers.values()]
            fixed.add_row(
                str(context),
                *(f"{statistics.median(v):.2f}" for v in cells.values()),
                " / ".join(f"{us:.0f}" for us in gather_us),
            )
    finally:
        paged_attention._gather = gathers["index_select"]  # type: ignore[assignment]
    console.print(fixed)


if __name__ == "__main__":
    main()
