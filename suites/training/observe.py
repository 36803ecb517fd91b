"""What watches a training run beside its steps: the live export ([export], the
Pushgateway) and the accelerator sampler ([telemetry]), started and stopped together."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from moeperf.collectors.export.live_export import LiveExporter
from moeperf.collectors.export.push import push_run
from moeperf.collectors.store import RunWriter
from moeperf.suites.telemetry import Telemetry
from moeperf.suites.telemetry_spec import TelemetrySpec
from moeperf.suites.training.spec import TrainingExportSpec
from moeperf.suites.training.telemetry import training_telemetry

Say = Callable[[str], None]


@contextmanager
def observed(
    name: str,
    target: str,
    run: RunWriter,
    export: TrainingExportSpec,
    telemetry_spec: TelemetrySpec,
    pushgateway_url: str | None,
    say: Say,
) -> Iterator[tuple[LiveExporter | None, Telemetry | None]]:
    """The run's exporter (None unless live metrics or a Pushgateway are wanted) and
    sampler (None when off); at the end, however the run ended, the sampler stops (if the
    summary has not stopped it already) and the metrics are pushed."""
    wanted = export.live_metrics or bool(pushgateway_url)
    exporter = LiveExporter(name, target) if wanted else None
    if exporter is not None and export.live_metrics:
        say(f"live metrics: http://127.0.0.1:{exporter.serve(export.metrics_port)}/metrics")
    telemetry = None
    try:
        if telemetry_spec.enabled:
            telemetry = training_telemetry(telemetry_spec, run, exporter)
            telemetry.start()
        yield exporter, telemetry
    finally:
        if telemetry is not None:
            telemetry.finish()
        if exporter is not None:
            _push(name, target, run, exporter, pushgateway_url, say)
            exporter.close()


def _push(
    name: str,
    target: str,
    run: RunWriter,
    exporter: LiveExporter,
    pushgateway_url: str | None,
    say: Say,
) -> None:
    """A failed push is a note, not an error: the run is measured."""
    if not pushgateway_url:
        return
    warning = push_run(
        pushgateway_url,
        exporter,
        suite=name,
        target=target,
        success=run.manifest.status == "complete",
    )
    if warning:
        run.add_note(f"warning: {warning}")
        say(f"warning: {warning}")
