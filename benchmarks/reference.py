"""``python benchmarks/reference.py [--quick]``: the reference engine, measured.

Three experiments against the embedded reference target (``targets.serving``), each
configuration one stored run made by the same path as ``moeperf run`` (the shipped
``reference-*`` specs with overrides), then printed as tables:

a. output tokens/s at 1, 4, 16 and 32 streams (closed loop, fixed 64-token prompts and
   64 output tokens, ignore_eos), and the ratio to one stream (``reference-sweep``);
b. MTP off against 1, 2 and 3 draft tokens at 1 and 16 streams: tokens/s, accepted tokens
   per step, acceptance per draft position, TPOT p50 (``reference-mtp``);
c. prefix caching on against off on a shared-prefix workload: TTFT p50/p99 and the
   prefix-cache hit ratio (``reference-prefix``).

Every run starts its own target and warms it with a few unmeasured requests. All numbers
come from the runs' summaries: latencies and throughput from the requests, speculation and
prefix-cache numbers from the target's own counters over each level (the run's scrapes of
its /metrics, ``collectors.target_counters``), as ``moeperf run`` shows them.
``--json PATH`` writes every row with its run id.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from reference_tables import LevelResult, concurrency_table, mtp_table, prefix_table
from rich.console import Console

from moeperf.collectors.errors import MoeperfError
from moeperf.collectors.serving_records import ServingSummary
from moeperf.collectors.store import RunInterrupted, RunStore, RunWriter
from moeperf.exits import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, exit_code
from moeperf.specs import load_spec
from moeperf.suites.serving.runner import run_serving

PARTS = ("concurrency", "mtp", "prefix")
WARMUP_REQUESTS = 3


@dataclass(frozen=True)
class BenchScale:
    """How long each level runs and which configurations are measured."""

    duration_s: float
    warmup_s: float
    cooldown_s: float
    levels: tuple[int, ...] = (1, 4, 16, 32)  # streams, part a
    mtp_tokens: tuple[int, ...] = (0, 1, 2, 3)  # part b
    mtp_levels: tuple[int, ...] = (1, 16)
    prefix_level: int = 4  # streams, part c
    parts: tuple[str, ...] = PARTS


# 7 target starts; quick: 16 levels of 6 s, a few minutes in all on 2 cores.
QUICK = BenchScale(duration_s=6.0, warmup_s=1.0, cooldown_s=0.5)
FULL = BenchScale(duration_s=20.0, warmup_s=2.0, cooldown_s=1.0)


def warm_up(base_url: str, model: str, requests: int = WARMUP_REQUESTS) -> None:
    """A few requests before the first level, so that no level measures a cold target
    (torch's first forward passes allocate and pick kernels)."""
    body = {"model": model, "prompt": "warm up " * 16, "max_tokens": 16, "ignore_eos": True}
    for _ in range(requests):
        request = urllib.request.Request(
            base_url.rstrip("/") + "/v1/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as answer:
            answer.read()


def _levels_override(levels: Sequence[int]) -> str:
    return "load.levels=[" + ",".join(str(level) for level in levels) + "]"


class Bench:
    """Runs the parts of a ``BenchScale`` into ``store``, telling ``console`` as it goes."""

    def __init__(
        self,
        scale: BenchScale,
        store: RunStore,
        console: Console,
        overrides: Sequence[str] = (),
    ) -> None:
        self.scale = scale
        self.store = store
        self.console = console
        self.overrides = list(overrides)  # --set KEY=VALUE for every run, applied last

    def _run(
        self, part: str, spec_name: str, levels: Sequence[int], knobs: Mapping[str, object]
    ) -> list[LevelResult]:
        s = self.scale
        overrides = [
            _levels_override(levels),
            f"load.duration_s={s.duration_s}",
            f"load.warmup_s={s.warmup_s}",
            f"load.cooldown_s={s.cooldown_s}",
            # The bench prints its own tables; nothing listens on a live /metrics port.
            "export.live_metrics=false",
        ]
        overrides += [f"target.reference.{k}={json.dumps(v)}" for k, v in knobs.items()]
        overrides += self.overrides
        loaded = load_spec(spec_name, overrides)

        def started(run: RunWriter) -> None:
            warm_up(run.manifest.target["url"], run.manifest.target["model"])
            run.add_note(
                f"{WARMUP_REQUESTS} warm-up requests went to the target before the first "
                "level (not stored, not in its counters per level)."
            )

        knob_text = " ".join(f"{k}={v}" for k, v in knobs.items())
        self.console.print(f"[bold]{part}[/bold] {spec_name} {knob_text} levels={list(levels)}")
        run_id = run_serving(
            loaded.serving,
            loaded.given,
            self.store,
            None,
            started,
            say=lambda line: self.console.print(line, markup=False),
        )
        reader = self.store.open(run_id)
        summary = reader.summary()
        scenarios = summary.scenarios if isinstance(summary, ServingSummary) else {}
        config = reader.manifest.target.get("config", {})
        rows = []
        for scenario, entry in scenarios.items():
            rows.append(
                LevelResult(
                    part=part,
                    run_id=run_id,
                    run_status=reader.manifest.status,
                    scenario=scenario,
                    streams=int(entry.level or 0),
                    mtp_tokens=int(config.get("mtp_tokens", 0)),
                    prefix_caching=bool(config.get("enable_prefix_caching", False)),
                    requests_ok=entry.ok,
                    requests_failed=entry.errors + entry.cancelled,
                    output_tok_s=entry.output_throughput_tok_s,
                    ttft_p50_s=entry.latency_s.ttft_s.value_at(0.5),
                    ttft_p99_s=entry.latency_s.ttft_s.value_at(0.99),
                    tpot_p50_s=entry.latency_s.tpot_s.value_at(0.5),
                    counters=entry.target_counters,
                )
            )
        self.console.print(f"  run {run_id}: {reader.manifest.status}")
        return rows

    def concurrency(self) -> list[LevelResult]:
        return self._run("concurrency", "reference-sweep", self.scale.levels, {"mtp_tokens": 0})

    def mtp(self) -> list[LevelResult]:
        rows = []
        for k in self.scale.mtp_tokens:
            rows += self._run("mtp", "reference-mtp", self.scale.mtp_levels, {"mtp_tokens": k})
        return rows

    def prefix(self) -> list[LevelResult]:
        rows = []
        for on in (True, False):
            knobs = {"enable_prefix_caching": on}
            rows += self._run("prefix", "reference-prefix", [self.scale.prefix_level], knobs)
        return rows

    def run(self) -> list[LevelResult]:
        rows: list[LevelResult] = []
        tables = {"concurrency": concurrency_table, "mtp": mtp_table, "prefix": prefix_table}
        for part in self.scale.parts:
            rows += getattr(self, part)()
        for part in self.scale.parts:
            self.console.print(tables[part]([r for r in rows if r.part == part]))
        return rows


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers like 1,4,16; got {text!r}") from None


def _parts(text: str) -> tuple[str, ...]:
    parts = tuple(p.strip() for p in text.split(",") if p.strip())
    unknown = [p for p in parts if p not in PARTS]
    if unknown or not parts:
        raise argparse.ArgumentTypeError(f"parts are {', '.join(PARTS)}; got {text!r}")
    return parts


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python benchmarks/reference.py", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="6 s per level (default 20 s)")
    parser.add_argument("--runs-dir", default="runs", help="where runs are stored")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write every row here")
    parser.add_argument("--model", metavar="DIR", help="model directory (default: shipped)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a field of every run's spec, e.g. target.reference.threads=1",
    )
    parser.add_argument("--parts", type=_parts, help=f"a subset of {','.join(PARTS)}")
    parser.add_argument("--duration-s", type=float, help="seconds per level")
    parser.add_argument("--levels", type=_ints, help="streams of part a, e.g. 1,4,16,32")
    parser.add_argument("--mtp-tokens", type=_ints, help="draft tokens of part b, e.g. 0,1,2,3")
    parser.add_argument("--mtp-levels", type=_ints, help="streams of part b, e.g. 1,16")
    parser.add_argument("--prefix-level", type=int, help="streams of part c")
    return parser


def scale_from_args(args: argparse.Namespace) -> BenchScale:
    scale = QUICK if args.quick else FULL
    given = {
        "parts": args.parts,
        "levels": args.levels,
        "mtp_tokens": args.mtp_tokens,
        "mtp_levels": args.mtp_levels,
        "prefix_level": args.prefix_level,
    }
    scale = dataclasses.replace(scale, **{k: v for k, v in given.items() if v is not None})
    if args.duration_s is not None:
        # Warm-up and cool-down keep their share of a level.
        ratio = args.duration_s / scale.duration_s
        scale = dataclasses.replace(
            scale,
            duration_s=args.duration_s,
            warmup_s=scale.warmup_s * ratio,
            cooldown_s=scale.cooldown_s * ratio,
        )
    return scale


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    # Wide enough for table (b) in one line per row when output is not a terminal.
    console = Console(width=None if sys.stdout.isatty() else 200)
    err = Console(stderr=True)
    overrides = list(args.set)
    if args.model:
        overrides.insert(0, f"target.reference.model_dir={json.dumps(args.model)}")
    bench = Bench(scale_from_args(args), RunStore(args.runs_dir), console, overrides)
    try:
        rows = bench.run()
    except (KeyboardInterrupt, RunInterrupted):
        err.print("interrupted; the runs so far are stored", markup=False)
        return EXIT_INTERRUPTED
    except MoeperfError as exc:
        err.print(f"error: {exc}", markup=False, highlight=False)
        return exit_code(exc)
    if args.json is not None:
        args.json.write_text(json.dumps([r.to_dict() for r in rows], indent=2) + "\n")
        console.print(f"rows: {args.json}")
    return EXIT_OK if all(r.run_status == "complete" for r in rows) else EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
