"""``python benchmarks/mtp_versus.py``: vLLM's Qwen3-Next MTP against the reference engine's,
on the same weights (the shipped hybrid model), each as an MTP A/B of its own.

vLLM (its CPU build, ``benchmarks/vllm_server.py``) serves ``targets/model/hybrid`` three
times, MTP off and with 1 and 2 draft tokens (``--speculative-config {"method": "mtp"}``;
one MTP layer, reused for the second draft), in bf16 (its CPU linear-attention kernel's),
eager (``--enforce-eager``), prefix caching off (with it on, vLLM's state cache copies with
a Triton kernel this CPU build lacks), and moeperf runs the ``mtp-ab``
suite over the three as url arms. The reference engine runs the same suite on the same
directory (in float32, its default), with the same workload: completions, 64 prompt
tokens, 48 output tokens, greedy, 1 and 4 streams, 2 interleaved blocks of 6 s per arm.
Both draft with the same MTP weights, so their acceptance should agree: vLLM's from its own
counters, the engine's from its own.

Printed, per engine, arm and streams: acceptance (accepted / drafted tokens), per draft
position, tokens per verify step, output tok/s and TPOT p50 and the output rate's ratio to
MTP off with its 95% CI and verdict, and whether greedy outputs equal MTP off's.
``--json PATH`` writes every row.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import vllm_server
from rich.console import Console
from rich.table import Table

from moeperf.cli import main as moeperf
from moeperf.collectors.mtp_ab_records import MtpAbSummary
from moeperf.collectors.serving_records import ServingSummary
from moeperf.collectors.store import RunStore
from moeperf.targets.model.checkpoint import hybrid_model_dir

DRAFTS = (0, 1, 2)
COMMON = [
    "workload.output_tokens.mean=48", "load.levels=[1, 4]", "load.duration_s=6.0",
    "mtp_ab.modes=['greedy']", "mtp_ab.blocks=2", "mtp_ab.equality_prompts=8",
    f"mtp_ab.drafts={list(DRAFTS)}",
    # The client shares the host with the server; the arms are compared with each other.
    "harness.max_loop_lag_p99_s=1.0", "harness.max_cpu_fraction=1.0",
]  # fmt: skip


@dataclass(frozen=True)
class Row:
    engine: str
    run_id: str
    drafts: int
    streams: int
    acceptance: float | None
    by_position: tuple[float, ...] | None
    tokens_per_step: float | None
    output_tok_s: float | None
    tpot_p50_s: float | None
    rate_ratio: float | None  # output tok/s over MTP off's
    rate_ci: tuple[float | None, float | None]
    rate_verdict: str
    greedy_equal: bool | None


@contextmanager
def vllm_arms(model_dir: Path) -> Iterator[list[str]]:
    with ExitStack() as stack:
        urls = []
        for drafts in DRAFTS:
            speculative = {"method": "mtp", "num_speculative_tokens": drafts} if drafts else None
            server = vllm_server.VllmServer(
                model_dir, enable_prefix_caching=False, speculative=speculative
            )
            urls.append(stack.enter_context(vllm_server.running(server)))
        yield urls


def run_ab(runs: Path, overrides: Sequence[str]) -> tuple[str, MtpAbSummary]:
    args = ["--runs-dir", str(runs), "run", "mtp-ab"]
    for item in [*COMMON, *overrides]:
        args += ["--set", item]
    moeperf(args)
    reader = RunStore(runs).open("latest")
    summary = reader.summary()
    if not isinstance(summary, ServingSummary) or summary.mtp_ab is None:
        raise RuntimeError(f"run {reader.run_id} stored no MTP A/B ({reader.manifest.status})")
    return reader.run_id, summary.mtp_ab


def rows_of(engine: str, run_id: str, ab: MtpAbSummary) -> list[Row]:
    equal = {d: None if ab.equality is None else ab.equality.passed for d in DRAFTS}
    if ab.equality is not None and not ab.equality.not_available:
        failing = {m.drafts for m in ab.equality.mismatches}
        equal = {d: d not in failing for d in DRAFTS}
    rows = []
    for arm in ab.arm_levels:
        effect = next(
            (e for e in ab.effects
             if (e.drafts, e.streams, e.metric) == (arm.drafts, arm.streams, "output tokens/s")),
            None,
        )  # fmt: skip
        rows.append(
            Row(
                engine, run_id, arm.drafts, arm.streams, arm.acceptance_ratio,
                arm.acceptance_by_position, arm.tokens_per_step, arm.output_tokens_per_s,
                arm.tpot_p50_s, effect.ratio if effect else None,
                (effect.ci_low, effect.ci_high) if effect else (None, None),
                effect.verdict if effect else "-", equal.get(arm.drafts) if arm.drafts else None,
            )
        )  # fmt: skip
    return rows


def _num(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def table(rows: Sequence[Row]) -> Table:
    out = Table(title="MTP on the hybrid model: vLLM's against the reference engine's")
    for column in (
        "engine", "drafts", "streams", "acceptance", "by position", "tokens/step",
        "output tok/s", "TPOT p50 ms", "tok/s vs off [95% CI]", "greedy = off",
    ):  # fmt: skip
        out.add_column(column)
    for r in rows:
        lo, hi = r.rate_ci
        interval = f"[{_num(lo, '.2f')}, {_num(hi, '.2f')}]"
        ratio = "-" if r.drafts == 0 else f"{_num(r.rate_ratio, '.2f')} {interval} {r.rate_verdict}"
        out.add_row(
            r.engine, str(r.drafts), str(r.streams), _num(r.acceptance, ".2f"),
            "-" if not r.by_position else " ".join(f"{p:.2f}" for p in r.by_position),
            _num(r.tokens_per_step, ".2f"), _num(r.output_tok_s, ".1f"),
            _num(None if r.tpot_p50_s is None else r.tpot_p50_s * 1e3, ".2f"), ratio,
            "-" if r.greedy_equal is None else ("yes" if r.greedy_equal else "NO"),
        )  # fmt: skip
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python benchmarks/mtp_versus.py", description=__doc__)
    parser.add_argument("--runs-dir", default="runs")
    parser.add_argument("--json", metavar="PATH", help="write every row as JSON")
    args = parser.parse_args(argv)
    console = Console(width=None if sys.stdout.isatty() else 180)
    runs = Path(args.runs_dir)
    model_dir = hybrid_model_dir()
    rows: list[Row] = []
    if vllm_server.installed():
        with vllm_arms(model_dir) as urls:
            run_id, ab = run_ab(runs, [
                "target.kind='url'", f"target.url='{urls[0]}'", "target.api='completions'",
                "workload.tokenizer='server'", f"mtp_ab.urls={json.dumps(urls)}",
            ])  # fmt: skip
        rows += rows_of(f"vLLM {vllm_server.VLLM_VERSION}", run_id, ab)
    else:
        console.print("vLLM: not installed (docs/targets/vllm.md); its arms skipped")
    run_id, ab = run_ab(runs, [f"target.reference.model_dir='{model_dir}'"])
    rows += rows_of("reference engine", run_id, ab)
    console.print(table(rows))
    if args.json:
        Path(args.json).write_text(
            json.dumps([dataclasses.asdict(r) for r in rows], indent=2) + "\n", encoding="utf-8"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
