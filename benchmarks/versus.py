"""``python benchmarks/versus.py``: the reference engine against ``transformers serve`` and
vLLM (its CPU build, ``benchmarks/vllm_server.py``; skipped, and said, where it is not
installed).

All three serve the same model directory (the shipped tiny MoE) on this host's CPU with the
same number of torch threads, one after the other in the same sitting, and all are
driven by moeperf through the same path as ``moeperf run``, with the same workload: chat
requests of 128 prompt tokens and up to 64 output tokens, greedy (temperature 0), built
with the model directory's own tokenizer so both get the same prompts, ``ignore_eos`` off
(transformers serve refuses it), at 1, 4 and 16 streams. The reference engine runs with
MTP off (the comparable engine) and with its shipped default of 2 draft tokens.

Printed: output tokens/s, TTFT p50/p99, TPOT p50, mean output tokens per request (the
workloads match when these agree) and failed requests, per target and level, and the
reference's output rate over transformers serve's. ``--json PATH`` writes every row.

Each serves in its own default precision, as a user gets it: the reference engine float32,
transformers serve and vLLM the config's bfloat16; vLLM compiles its model (no
``--enforce-eager``), its one OpenMP thread bound to a core.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import vllm_server
from rich.console import Console
from rich.table import Table
from transformers_serve import TransformersServe, running

from moeperf.collectors.serving_records import ServingSummary
from moeperf.collectors.store import RunStore
from moeperf.exits import EXIT_OK
from moeperf.specs import validate_spec
from moeperf.suites.serving.embedded.reference import default_model_dir, host_threads, usable_cores
from moeperf.suites.serving.runner import run_serving

LEVELS = (1, 4, 16)


@dataclass(frozen=True)
class Arm:
    name: str
    kind: str  # "transformers", "vllm" or "reference"
    mtp_tokens: int = 0


ARMS = (
    Arm("transformers serve", "transformers"),
    Arm(f"vLLM {vllm_server.VLLM_VERSION} (CPU)", "vllm"),
    Arm("reference, MTP off", "reference", 0),
    Arm("reference, MTP 2 (default)", "reference", 2),
)


@dataclass(frozen=True)
class Row:
    arm: str
    run_id: str
    streams: int
    requests_ok: int
    requests_failed: int
    output_tok_s: float | None
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    tpot_p50_s: float | None
    mean_output_tokens: float | None


def spec_data(
    arm: Arm, url: str, model_dir: Path, threads: int, duration_s: float
) -> dict[str, Any]:
    target: dict[str, Any] = {"api": "chat", "ignore_eos": False}
    if arm.kind in ("transformers", "vllm"):
        target |= {"kind": "url", "url": url}
    else:
        target |= {
            "kind": "reference",
            "reference": {
                "model_dir": str(model_dir),
                "threads": threads,
                "mtp_tokens": arm.mtp_tokens,
                "max_running_requests": 16,
            },
        }
    return {
        "suite": "serving",
        "name": "versus-" + arm.kind,
        "target": target,
        "workload": {
            "kind": "random",
            "tokenizer": str(model_dir),
            "num_prompts": 1024,
            "input_tokens": {"dist": "fixed", "mean": 128},
            "output_tokens": {"dist": "fixed", "mean": 64},
        },
        "load": {
            "mode": "concurrency",
            "levels": list(LEVELS),
            "duration_s": duration_s,
            "warmup_s": 3.0,
            "cooldown_s": 1.0,
        },
        "export": {"live_metrics": False},
    }


@contextmanager
def _served(arm: Arm, model_dir: Path, threads: int) -> Iterator[str]:
    if arm.kind == "vllm":
        server = vllm_server.VllmServer(model_dir, threads=threads, eager=False)
        with vllm_server.running(server) as url:
            yield url
        return
    if arm.kind != "transformers":
        yield ""
        return
    # 128 blocks of 32 tokens: 16 streams of 128 + 64 tokens fit (the test's 64 hold 4).
    with running(TransformersServe(model_dir, cb_num_blocks=128, threads=threads)) as url:
        yield url


def measure(
    arm: Arm, store: RunStore, model_dir: Path, threads: int, duration_s: float
) -> list[Row]:
    with _served(arm, model_dir, threads) as url:
        loaded = validate_spec(spec_data(arm, url, model_dir, threads, duration_s), arm.name)
        run_id = run_serving(loaded.serving, loaded.given, store)
    reader = store.open(run_id)
    summary = reader.summary()
    if not isinstance(summary, ServingSummary):
        raise RuntimeError(f"run {run_id} stored no serving summary ({reader.manifest.status})")
    requests = reader.requests()
    rows = []
    for scenario, entry in summary.scenarios.items():
        measured = requests[
            (requests["scenario"] == scenario)
            & (requests["phase"] == "measure")
            & (requests["status"] == "ok")
        ]
        rows.append(
            Row(
                arm=arm.name,
                run_id=run_id,
                streams=int(entry.level or 0),
                requests_ok=entry.ok,
                requests_failed=entry.errors + entry.cancelled,
                output_tok_s=entry.output_throughput_tok_s,
                ttft_p50_s=entry.latency_s.ttft_s.value_at(0.5),
                ttft_p99_s=entry.latency_s.ttft_s.value_at(0.99),
                tpot_p50_s=entry.latency_s.tpot_s.value_at(0.5),
                mean_output_tokens=(
                    float(measured["output_tokens"].mean()) if len(measured) else None
                ),
            )
        )
    return rows


def _num(value: float | None, spec: str, scale: float = 1.0) -> str:
    return "n/a" if value is None else format(value * scale, spec)


def table(rows: Sequence[Row]) -> Table:
    base = {r.streams: r.output_tok_s for r in rows if r.arm == ARMS[0].name}
    out = Table(
        title="reference engine vs transformers serve and vLLM (same model, CPU, same threads)"
    )
    for column in (
        "target", "streams", "output tok/s", "vs transformers", "TTFT p50 ms",
        "TTFT p99 ms", "TPOT p50 ms", "mean output tokens", "ok", "failed",
    ):  # fmt: skip
        out.add_column(column)
    for r in rows:
        theirs = base.get(r.streams)
        ratio = r.output_tok_s / theirs if r.output_tok_s and theirs else None
        out.add_row(
            r.arm,
            str(r.streams),
            _num(r.output_tok_s, ".1f"),
            "-" if r.arm == ARMS[0].name else _num(ratio, ".2f") + ("x" if ratio else ""),
            _num(r.ttft_p50_s, ".1f", 1e3),
            _num(r.ttft_p99_s, ".1f", 1e3),
            _num(r.tpot_p50_s, ".2f", 1e3),
            _num(r.mean_output_tokens, ".1f"),
            str(r.requests_ok),
            str(r.requests_failed),
        )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python benchmarks/versus.py", description=__doc__)
    parser.add_argument("--runs-dir", default="runs")
    parser.add_argument("--duration-s", type=float, default=20.0, help="per level (default 20)")
    parser.add_argument(
        "--threads",
        type=int,
        default=host_threads(usable_cores()),
        help="torch threads of both servers (default: the embedded target's rule, half "
        "the usable cores: the load workers share the host)",
    )
    parser.add_argument("--json", metavar="PATH", help="write every row as JSON")
    args = parser.parse_args(argv)
    console = Console(width=None if sys.stdout.isatty() else 160)
    store = RunStore(args.runs_dir)
    model_dir = default_model_dir()
    rows: list[Row] = []
    for arm in ARMS:
        if arm.kind == "vllm" and not vllm_server.installed():
            console.print(f"[bold]{arm.name}[/bold]: not installed (docs/targets/vllm.md); skipped")
            continue
        console.print(f"[bold]{arm.name}[/bold]: levels {list(LEVELS)}, {args.threads} thread(s)")
        rows += measure(arm, store, model_dir, args.threads, args.duration_s)
    console.print(table(rows))
    if args.json:
        Path(args.json).write_text(
            json.dumps([dataclasses.asdict(r) for r in rows], indent=2) + "\n", encoding="utf-8"
        )
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
