"""The gate on runs made for it: two targets interleaved (paired), and A/A calibration.

Paired mode runs one spec against targets A and B in alternating blocks, each block a
short run of its own, in one job, so that drift of the host (thermal, background load,
caches) falls on both sides alike. Blocks go A B B A A B B A ... ("abba", which also
cancels a linear drift within every four blocks) or A B A B ... ("abab"). The samples of
all A blocks are pooled, and of all B blocks, and gated with ``reports.gate.gate``: B is
the candidate, A the baseline.

A/A calibration runs one target 2 x ``pairs`` times, gates run 2i + 1 against run 2i,
and reports how often the gate flagged a regression where there can be none: per metric
comparison, and per pair (any metric). Benjamini-Hochberg under no change at all bounds
the per-pair rate by alpha; the minimum effect should push it far below.

Targets are given as text:
- ``http://HOST:PORT`` (or ``url:http://...``): a running OpenAI-compatible server;
- ``synthetic``: the embedded synthetic target with the spec's ``[target.synthetic]``;
- ``synthetic:itl_s=0.011,ttft_s=0.05``: the same with fields changed (values in TOML
  syntax, as with --set), or ``synthetic:{"itl_s": 0.011}`` (a JSON object).
Each synthetic target is started once for the whole job, and every block drives it by URL.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import tomllib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from collectors.store import RunStore
from reports.gate import (
    GateResult,
    check_fingerprints,
    format_gate,
    gate,
    text_table,
    write_gate,
)
from reports.runs import load_run
from reports.samples import MetricSamples, pool_samples, run_samples
from suites.errors import SpecError, UsageError
from suites.serving.embedded.process import running_target
from suites.serving.runner import run_serving
from suites.spec import ServingSpec, SyntheticTargetSpec
from suites.spec import load_spec as _load_any_spec

ORDERS = ("abba", "abab")
Say = Callable[[str], Any]


def load_spec(spec_ref: str, overrides: list[str]) -> tuple[dict, ServingSpec]:
    """A serving spec; the paired gate and A/A calibration drive serving targets only."""
    given, spec = _load_any_spec(spec_ref, overrides)
    if not isinstance(spec, ServingSpec):
        raise SpecError(
            f"{spec_ref}: the paired gate and gate calibrate run serving specs; this one is "
            f"suite {spec.suite!r} (gate a training run against a baseline instead)"
        )
    return given, spec


@dataclass(frozen=True)
class TargetChoice:
    text: str  # as the user gave it
    url: str | None = None
    synthetic: Mapping[str, Any] | None = None


def parse_target(text: str, spec: ServingSpec) -> TargetChoice:
    """A target from its text form (see the module docstring); UsageError if malformed."""
    kind, _, rest = text.partition(":")
    if text.startswith(("http://", "https://")):
        return TargetChoice(text, url=text)
    if kind == "url" and rest.startswith(("http://", "https://")):
        return TargetChoice(text, url=rest)
    if kind != "synthetic":
        raise UsageError(
            f"target {text!r}: expected a URL (http://...), 'synthetic', "
            "'synthetic:FIELD=VALUE,...' or 'synthetic:{JSON}'"
        )
    fields = _synthetic_fields(text, rest.strip())
    try:
        config = SyntheticTargetSpec.model_validate(
            {**spec.target.synthetic.model_dump(), **fields}
        )
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        valid = ", ".join(SyntheticTargetSpec.model_fields)
        raise UsageError(f"target {text!r}: {problems} (valid fields: {valid})") from None
    return TargetChoice(text, synthetic=config.model_dump())


def _synthetic_fields(text: str, rest: str) -> dict[str, Any]:
    if not rest:
        return {}
    if rest.startswith("{"):
        try:
            fields = json.loads(rest)
        except ValueError as exc:
            raise UsageError(f"target {text!r}: not a JSON object: {exc}") from None
        if not isinstance(fields, dict):
            raise UsageError(f"target {text!r}: settings must be a JSON object")
        return fields
    fields = {}
    for assignment in rest.split(","):
        key, sep, raw = assignment.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"target {text!r}: expected FIELD=VALUE, got {assignment!r}")
        try:
            fields[key.strip()] = tomllib.loads(f"v = {raw.strip()}")["v"]
        except tomllib.TOMLDecodeError:
            fields[key.strip()] = raw.strip()
    return fields


@contextmanager
def started(choices: Sequence[TargetChoice]) -> Iterator[list[str]]:
    """The URL of each target, starting the synthetic ones for the block's duration."""
    with ExitStack() as stack:
        urls = []
        for choice in choices:
            if choice.url is not None:
                urls.append(choice.url)
            else:
                config = dict(choice.synthetic or {})
                urls.append(stack.enter_context(running_target("targets.synthetic", config)))
        yield urls


def block_order(blocks: int, order: str = "abba") -> list[str]:
    """The sequence of "a" and "b" for ``blocks`` blocks per side."""
    if order not in ORDERS:
        raise UsageError(f"order {order!r}: valid orders: {', '.join(ORDERS)}")
    if blocks < 1:
        raise UsageError("blocks must be at least 1 per target")
    pairs = [("a", "b") if order == "abab" or i % 2 == 0 else ("b", "a") for i in range(blocks)]
    return [side for pair in pairs for side in pair]


def _run_block(spec_ref: str, overrides: Sequence[str], url: str, store: RunStore, say: Say) -> str:
    given, spec = load_spec(spec_ref, [*overrides, "target.kind=url", f"target.url={url}"])
    return run_serving(spec, given, store, say=say)


def _pooled(store: RunStore, run_ids: Sequence[str]) -> list[MetricSamples]:
    return pool_samples(run_samples(load_run(store, run_id)) for run_id in run_ids)


def _run_notes(store: RunStore, run_ids: Sequence[str]) -> list[str]:
    notes = []
    for run_id in run_ids:
        manifest = store.open(run_id).manifest
        if manifest.status != "complete":
            notes.append(f"run {run_id} ended {manifest.status}: {manifest.status_reason}")
    return notes


def paired_gate(
    spec_ref: str,
    target_a: str,
    target_b: str,
    blocks: int,
    runs_dir: str | Path = "runs",
    overrides: Sequence[str] = (),
    *,
    order: str = "abba",
    alpha: float = 0.05,
    min_effects: Mapping[str, float] | None = None,
    say: Say = lambda _line: None,
) -> tuple[GateResult, dict[str, list[str]]]:
    """Run A and B in interleaved blocks and gate B (candidate) against A (baseline).

    Returns the gate's result and the run ids of each side ({"a": [...], "b": [...]})."""
    _, spec = load_spec(spec_ref, list(overrides))
    choices = {"a": parse_target(target_a, spec), "b": parse_target(target_b, spec)}
    sequence = block_order(blocks, order)
    store = RunStore(runs_dir)
    run_ids: dict[str, list[str]] = {"a": [], "b": []}
    with started([choices["a"], choices["b"]]) as (url_a, url_b):
        urls = {"a": url_a, "b": url_b}
        for number, side in enumerate(sequence, start=1):
            run_id = _run_block(spec_ref, overrides, urls[side], store, say)
            run_ids[side].append(run_id)
            say(f"block {number}/{len(sequence)}: {side.upper()} ({choices[side].text}) {run_id}")
    first_a, first_b = (store.open(ids[0]).manifest for ids in (run_ids["a"], run_ids["b"]))
    result = gate(
        _pooled(store, run_ids["b"]),
        _pooled(store, run_ids["a"]),
        alpha=alpha,
        min_effects=min_effects,
        fingerprint=check_fingerprints(first_a.host, first_b.host),
        baseline_label=f"A = {target_a} ({blocks} blocks pooled)",
        candidate_label=f"B = {target_b} ({blocks} blocks pooled)",
    )
    result.notes.append(f"paired blocks, order {''.join(sequence).upper()}")
    result.notes.extend(_run_notes(store, run_ids["a"] + run_ids["b"]))
    return result, run_ids


def paired_command(
    spec_ref: str,
    target_a: str,
    target_b: str,
    blocks: int,
    runs_dir: str | Path = "runs",
    overrides: Sequence[str] = (),
    out_dir: str | Path | None = None,
    *,
    order: str = "abba",
    alpha: float = 0.05,
    min_effects: Mapping[str, float] | None = None,
    out: Say = print,
) -> int:
    """Paired gate: print the table, write gate.json and gate.txt into ``out_dir``
    (default ``<runs_dir>/gates/<time>-paired/``). Exit code 0 or 1 (a regression)."""
    result, run_ids = paired_gate(
        spec_ref,
        target_a,
        target_b,
        blocks,
        runs_dir,
        overrides,
        order=order,
        alpha=alpha,
        min_effects=min_effects,
        say=out,
    )
    out(format_gate(result))
    directory = Path(out_dir) if out_dir else _gates_dir(runs_dir, "paired")
    extra = {"targets": {"a": target_a, "b": target_b}, "order": order, "runs": run_ids}
    out(f"written: {write_gate(result, directory, extra)} and gate.txt")
    return result.exit_code


@dataclass(frozen=True)
class Calibration:
    """A/A runs of one target and how often the gate cried wolf."""

    alpha: float
    pairs: list[tuple[str, str, GateResult]]  # (baseline run, candidate run, result)

    @property
    def comparisons(self) -> int:
        """Metric comparisons that reached a verdict by test (not too few samples)."""
        return sum(1 for *_, r in self.pairs for v in r.verdicts if v.q_value is not None)

    @property
    def false_positives(self) -> int:
        return sum(len(r.regressions) for *_, r in self.pairs)

    @property
    def metric_rate(self) -> float:
        return self.false_positives / self.comparisons if self.comparisons else float("nan")

    @property
    def pair_rate(self) -> float:
        flagged = sum(1 for *_, r in self.pairs if r.regressions)
        return flagged / len(self.pairs) if self.pairs else float("nan")

    @property
    def raw_significant(self) -> int:
        """Comparisons with q < alpha, material or not: what the test alone would flag."""
        return sum(
            1
            for *_, r in self.pairs
            for v in r.verdicts
            if v.q_value is not None and v.q_value < self.alpha
        )

    def suggested_min_effects(self) -> dict[str, float]:
        """Per metric whose A/A intervals reached past its minimum effect: the smallest
        minimum effect (rounded up to 1%) that would have flagged none of these pairs, in
        either order. A lower bound from few pairs: calibrate with ten or more."""
        worst: dict[str, float] = {}
        for *_, result in self.pairs:
            for v in result.verdicts:
                if v.ci_low is None or v.q_value is None:
                    continue
                if v.direction == "lower":  # bad side above 1; the reversed pair's too
                    excess = max(v.ci_low - 1, 1 / v.ci_high - 1)
                else:
                    excess = max(1 - v.ci_high, 1 - 1 / v.ci_low)
                if excess > v.min_effect:
                    worst[v.key] = max(worst.get(v.key, 0.0), excess)
        return {key: math.ceil(value * 100) / 100 for key, value in worst.items()}

    def to_dict(self) -> dict[str, Any]:
        return {
            "alpha": self.alpha,
            "suggested_min_effects": self.suggested_min_effects(),
            "pairs": [
                {"baseline": a, "candidate": b, "gate": r.to_dict()} for a, b, r in self.pairs
            ],
            "comparisons": self.comparisons,
            "false_positives": self.false_positives,
            "metric_false_positive_rate": self.metric_rate,
            "pair_false_positive_rate": self.pair_rate,
            "significant_but_not_material": self.raw_significant - self.false_positives,
        }


def calibrate_gate(
    spec_ref: str,
    pairs: int,
    runs_dir: str | Path = "runs",
    overrides: Sequence[str] = (),
    *,
    target: str = "synthetic",
    alpha: float = 0.05,
    min_effects: Mapping[str, float] | None = None,
    say: Say = lambda _line: None,
) -> Calibration:
    """Run ``target`` 2 x ``pairs`` times and gate each A/A pair (second against first)."""
    if pairs < 1:
        raise UsageError("pairs must be at least 1")
    _, spec = load_spec(spec_ref, list(overrides))
    choice = parse_target(target, spec)
    store = RunStore(runs_dir)
    results = []
    with started([choice]) as (url,):
        for pair in range(pairs):
            a = _run_block(spec_ref, overrides, url, store, say)
            b = _run_block(spec_ref, overrides, url, store, say)
            result = gate(
                run_samples(load_run(store, b)),
                run_samples(load_run(store, a)),
                alpha=alpha,
                min_effects=min_effects,
                baseline_label=a,
                candidate_label=b,
            )
            result.notes.extend(_run_notes(store, [a, b]))
            say(f"pair {pair + 1}/{pairs}: {len(result.regressions)} regression(s)")
            results.append((a, b, result))
    return Calibration(alpha, results)


def format_calibration(calibration: Calibration) -> str:
    rows = []
    for number, (a, b, r) in enumerate(calibration.pairs, start=1):
        tested = sum(1 for v in r.verdicts if v.q_value is not None)
        rows.append(
            (
                str(number),
                a,
                b,
                str(tested),
                str(len(r.regressions)),
                str(len(r.by_outcome("inconclusive"))),
                ", ".join(v.key for v in r.regressions) or "-",
            )
        )
    headers = ("pair", "A run", "A' run", "tested", "regressions", "inconclusive", "flagged")
    c = calibration
    return "\n".join(
        [
            text_table(headers, rows),
            f"A/A false positives: {c.false_positives} of {c.comparisons} metric comparisons "
            f"({c.metric_rate:.1%}); pairs with any regression: {c.pair_rate:.1%} of "
            f"{len(c.pairs)}; nominal alpha {c.alpha:g} (Benjamini-Hochberg per pair)",
            f"significant but below the minimum effect: {c.raw_significant - c.false_positives}",
            *(
                f"suggested minimum effect for {key}: {value:.0%} (A/A intervals reached past "
                "the current one)"
                for key, value in c.suggested_min_effects().items()
            ),
        ]
    )


def calibrate_command(
    spec_ref: str,
    pairs: int,
    runs_dir: str | Path = "runs",
    overrides: Sequence[str] = (),
    out_dir: str | Path | None = None,
    *,
    target: str = "synthetic",
    alpha: float = 0.05,
    min_effects: Mapping[str, float] | None = None,
    out: Say = print,
) -> int:
    """A/A calibration: print the table, write calibration.json into ``out_dir`` (default
    ``<runs_dir>/gates/<time>-calibration/``). Always 0: it measures, it does not judge."""
    calibration = calibrate_gate(
        spec_ref,
        pairs,
        runs_dir,
        overrides,
        target=target,
        alpha=alpha,
        min_effects=min_effects,
        say=out,
    )
    out(format_calibration(calibration))
    directory = Path(out_dir) if out_dir else _gates_dir(runs_dir, "calibration")
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "calibration.json"
    body = {"target": target, "spec": spec_ref, **calibration.to_dict()}
    path.write_text(json.dumps(_finite(body), indent=2), encoding="utf-8")
    out(f"written: {path}")
    return 0


def _finite(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    if isinstance(value, float) and value != value:
        return None
    return value


def _gates_dir(runs_dir: str | Path, kind: str) -> Path:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S-%f")
    return Path(runs_dir) / "gates" / f"{stamp}-{kind}"
