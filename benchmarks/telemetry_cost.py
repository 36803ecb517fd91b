"""Benchmark: what the accelerator sampler costs, per source and period.

    python benchmarks/telemetry_cost.py [--seconds 6]      (tox -e bench-telemetry)

For each case a real ``DeviceSampler`` reads its sources for ``--seconds`` on its thread,
as in a run, storing every sample to a list, and reports its own ``SamplerCost``: reads,
wall time per read (mean and max), the sampler thread's CPU time as a share of one core,
and ticks missed (reads that overran their period). Sources:
- "process": the RSS and CPU of a process tree, here a child process (``sleep``) of this
  one, as the target moeperf starts is its child;
- "dcgm": a DCGM exporter's page (the recorded page of two H200s shipped with the tests,
  tests/data/accel/) served by ``python -m http.server`` in another process on 127.0.0.1,
  so the fetch and the parse are timed and the serving is not;
- "nvml": this host's GPUs, where it has an NVML library and a driver; otherwise the row
  says why it was not measured.
Each case at the default period, 100 ms, and at 1 s. The table is what a run's summary
shows for its own sampler (``telemetry.cost``); nothing here is simulated.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.table import Table

from moeperf.collectors.accel_records import DeviceSample, DeviceSource, SamplerCost, Unavailable
from moeperf.collectors.sources.accel_sampler import DeviceSampler
from moeperf.collectors.sources.dcgm_source import open_dcgm
from moeperf.collectors.sources.nvml_source import open_nvml
from moeperf.collectors.sources.process_source import ProcessSource

PAGE = (
    Path(__file__).resolve().parents[1] / "tests" / "data" / "accel" / "dcgm_exporter_h200x2.prom"
)
PERIODS_S = (0.1, 1.0)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def _dcgm_page() -> Iterator[str]:
    """The recorded page at http://127.0.0.1:PORT/metrics, served by another process."""
    with tempfile.TemporaryDirectory() as root:
        shutil.copyfile(PAGE, Path(root) / "metrics")
        port = _free_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
            cwd=root,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                with socket.socket() as s:
                    if s.connect_ex(("127.0.0.1", port)) == 0:
                        break
                time.sleep(0.05)
            yield f"http://127.0.0.1:{port}/metrics"
        finally:
            server.terminate()
            server.wait()


@contextmanager
def _child() -> Iterator[int]:
    child = subprocess.Popen(["sleep", "3600"])
    try:
        yield child.pid
    finally:
        child.kill()
        child.wait()


def _sample(source: DeviceSource, period_s: float, seconds: float) -> tuple[SamplerCost, int]:
    kept: list[DeviceSample] = []
    sampler = DeviceSampler(
        [source], anchor_ns=time.monotonic_ns(), store=kept.append, period_s=period_s
    )
    sampler.start()
    time.sleep(seconds)
    return sampler.finish(), len(kept)


def _row(table: Table, name: str, period_s: float, cost: SamplerCost, samples: int) -> None:
    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value * 1e3:.2f}"

    cpu = "-" if cost.cpu_ratio is None else f"{cost.cpu_ratio * 100:.2f}"
    table.add_row(
        name,
        f"{period_s * 1e3:g}",
        str(cost.reads),
        str(samples),
        ms(cost.read_mean_s),
        ms(cost.read_max_s),
        cpu,
        str(cost.ticks_missed),
        str(sum(e.count for e in cost.errors)),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=6.0, help="per case")
    args = parser.parse_args(argv)
    table = Table(title=f"the accelerator sampler's own cost ({args.seconds:g} s per case)")
    for column in ("source", "period ms", "reads", "samples", "read mean ms", "read max ms",
                   "CPU % of a core", "ticks missed", "errors"):  # fmt: skip
        table.add_column(column, justify="left" if column == "source" else "right")
    notes = []
    cases: list[tuple[str, Callable[[], DeviceSource | Unavailable]]] = []
    with _child() as pid, _dcgm_page() as url:
        cases = [
            ("process (1 process)", lambda: ProcessSource(lambda: pid)),
            ("dcgm (2 GPUs, loopback)", lambda: open_dcgm(url)),
            ("nvml", open_nvml),
        ]
        for name, opener in cases:
            for period_s in PERIODS_S:
                source = opener()
                if isinstance(source, Unavailable):
                    notes.append(f"{name}: not measured: {source.reason}")
                    break
                try:
                    cost, samples = _sample(source, period_s, args.seconds)
                finally:
                    source.close()
                _row(table, name, period_s, cost, samples)
    console = Console(width=140)
    console.print(table)
    for note in notes:
        console.print(note, markup=False, highlight=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
