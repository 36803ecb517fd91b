"""The gate on runs made for it: two targets interleaved (paired). A/A calibration
(moeperf/gate_calibration.py) reuses the targets and blocks defined here.

Paired mode runs one spec against targets A and B in alternating blocks, each block a
short run of its own, in one job, so that drift of the host (thermal, background load,
caches) falls on both sides alike. Blocks go A B B A A B B A ... ("abba", which also
cancels a linear drift within every four blocks) or A B A B ... ("abab"). The samples of
all A blocks are pooled, and of all B blocks, and gated with ``reports.gate.gate``: B is
the candidate, A the baseline.

Comparable by construction: every block runs the same spec with the same overrides (only
the target's URL differs), on the same host, in the same job, so the spec check that
``moeperf gate RUN --baseline`` makes (reports/comparability.py) has nothing to find here
and is not made; the host fingerprints are still checked. The same holds for A/A
calibration. Everything else of the gate applies: a metric missing from B's blocks fails,
and too few judged metrics make the verdict inconclusive (exit 1).

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
import tomllib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from moeperf.collectors.store import RunStore
from moeperf.reports.comparability import check_fingerprints
from moeperf.reports.gate import gate
from moeperf.reports.gate_output import format_gate, write_gate
from moeperf.reports.runs import load_run
from moeperf.reports.samples import MetricSamples, pool_samples, run_samples
from moeperf.reports.verdicts import GateResult
from moeperf.specs import LoadedSpec, load_spec
from moeperf.suites.errors import SpecError, UsageError
from moeperf.suites.serving.embedded.process import running_target
from moeperf.suites.serving.runner import run_serving
from moeperf.suites.serving.spec import ServingSpec
from moeperf.suites.spec_errors import synthetic_problems
from moeperf.targets.synthetic.config import SyntheticConfig, SyntheticConfigError

ORDERS = ("abba", "abab")
Say = Callable[[str], Any]


def load_serving_spec(spec_ref: str, overrides: Sequence[str]) -> LoadedSpec:
    """A serving spec (``.serving``): the paired gate and A/A calibration drive serving
    targets only."""
    loaded = load_spec(spec_ref, overrides)
    if not isinstance(loaded.spec, ServingSpec):
        raise SpecError(
            f"{spec_ref}: the paired gate and gate calibrate run serving specs; this one is "
            f"suite {loaded.suite!r} (gate a training run against a baseline instead)"
        )
    return loaded


@dataclass(frozen=True)
class TargetChoice:
    text: str  # as the user gave it
    url: str | None = None
    synthetic: SyntheticConfig | None = None


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
        config = SyntheticConfig.from_dict({**spec.target.synthetic.to_dict(), **fields})
    except SyntheticConfigError as exc:
        problems = "; ".join(f"{p.where}: {p.message}" for p in synthetic_problems((), exc))
        raise UsageError(f"target {text!r}: {problems}") from None
    return TargetChoice(text, synthetic=config)


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
                config = (choice.synthetic or SyntheticConfig()).to_dict()
                urls.append(
                    stack.enter_context(running_target("moeperf.targets.synthetic", config))
                )
        yield urls


def block_order(blocks: int, order: str = "abba") -> list[str]:
    """The sequence of "a" and "b" for ``blocks`` blocks per side."""
    if order not in ORDERS:
        raise UsageError(f"order {order!r}: valid orders: {', '.join(ORDERS)}")
    if blocks < 1:
        raise UsageError("blocks must be at least 1 per target")
    pairs = [("a", "b") if order == "abab" or i % 2 == 0 else ("b", "a") for i in range(blocks)]
    return [side for pair in pairs for side in pair]


def run_block(spec_ref: str, overrides: Sequence[str], url: str, store: RunStore, say: Say) -> str:
    loaded = load_serving_spec(spec_ref, [*overrides, "target.kind=url", f"target.url={url}"])
    return run_serving(loaded.serving, loaded.given, store, say=say)


def _pooled(store: RunStore, run_ids: Sequence[str]) -> list[MetricSamples]:
    return pool_samples(run_samples(load_run(store, run_id)) for run_id in run_ids)


def run_notes(store: RunStore, run_ids: Sequence[str]) -> list[str]:
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
    spec = load_serving_spec(spec_ref, overrides).serving
    choices = {"a": parse_target(target_a, spec), "b": parse_target(target_b, spec)}
    sequence = block_order(blocks, order)
    store = RunStore(runs_dir)
    run_ids: dict[str, list[str]] = {"a": [], "b": []}
    with started([choices["a"], choices["b"]]) as (url_a, url_b):
        urls = {"a": url_a, "b": url_b}
        for number, side in enumerate(sequence, start=1):
            run_id = run_block(spec_ref, overrides, urls[side], store, say)
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
    result.notes.extend(run_notes(store, run_ids["a"] + run_ids["b"]))
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
    (default ``<runs_dir>/gates/<time>-paired/``). Exit code 0, or 1 (a regression, a
    metric missing from B, or too few metrics judged)."""
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
    directory = Path(out_dir) if out_dir else gates_dir(runs_dir, "paired")
    extra = {"targets": {"a": target_a, "b": target_b}, "order": order, "runs": run_ids}
    out(f"written: {write_gate(result, directory, extra)} and gate.txt")
    return result.exit_code


def gates_dir(runs_dir: str | Path, kind: str) -> Path:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S-%f")
    return Path(runs_dir) / "gates" / f"{stamp}-{kind}"
