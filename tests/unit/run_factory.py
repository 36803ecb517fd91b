"""Stored runs made for tests: real run directories (collectors.store), written the way the
runner writes them, of request records whose times the test chooses.

pytest's "prepend" import mode puts this folder on ``sys.path`` for the unit tests, so they
import it by name (``from run_factory import store_run``), as the integration tests import
``prometheus_stack``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from moeperf.collectors.records import RequestRecord, StepRecord
from moeperf.collectors.request_settings import RequestSettings
from moeperf.collectors.store import RunStore, RunWriter
from moeperf.collectors.summary import summarize_requests
from moeperf.collectors.summary_types import RunSummary
from moeperf.collectors.tables import records_frame

S = 1_000_000_000
MS = 1_000_000

End = Literal["complete", "aborted", "invalid", "failed"] | Callable[[RunWriter], None] | None
# The reason each way a run can end gives, as a real run's would read.
END_REASONS = {
    "aborted": "interrupted by SIGINT",
    "invalid": "client bottleneck at c=4",
    "failed": "levels failed: c=4 (http 39: 39 of 39 measured requests failed)",
}


def lognormal_requests(
    n: int,
    *,
    seed: int,
    scenario: str = "c=1",
    tokens: int = 20,
    itl_s: float = 0.01,
    ttft_s: float = 0.05,
    sigma: float = 0.05,
    every_ns: int = S // 4,
) -> list[RequestRecord]:
    """``n`` ok requests sent every ``every_ns``, one token a chunk: a lognormal TTFT around
    ``ttft_s`` and gaps around ``itl_s`` (a closed-loop level's shape, reproducible)."""
    rng = np.random.default_rng(seed)
    records = []
    for i in range(n):
        send = i * every_ns
        first = send + int(rng.lognormal(np.log(ttft_s), sigma) * S)
        gaps = (rng.lognormal(np.log(itl_s), sigma, tokens - 1) * S).astype(int)
        chunks = [first, *(first + np.cumsum(gaps)).tolist()]
        records.append(
            RequestRecord(
                request_id=f"r{i}",
                scenario=scenario,
                phase="measure",
                worker=0,
                intended_send_ns=send,
                send_ns=send,
                done_ns=chunks[-1] + 1000,
                status="ok",
                chunk_ns=chunks,
                chunk_tokens=[1] * tokens,
                first_token_ns=first,
                last_token_ns=chunks[-1],
                output_tokens=tokens,
            )
        )
    return records


def store_run(
    runs: RunStore | Path,
    requests: Iterable[RequestRecord] = (),
    *,
    steps: Sequence[StepRecord] = (),
    spec_given: dict[str, Any] | None = None,
    spec_resolved: dict[str, Any] | None = None,
    target: dict[str, Any] | None = None,
    settings: RequestSettings | None = None,
    summary: RunSummary | Literal["computed"] | None = None,
    end: End = "complete",
) -> RunWriter:
    """A serving run in ``runs`` holding ``requests`` (and ``steps``); its summary as given,
    or ``"computed"`` from the requests as the runner computes it; ended as ``end`` says
    (None: left running, as a run whose process died)."""
    store = runs if isinstance(runs, RunStore) else RunStore(runs)
    run = store.create("serving", spec_given=spec_given, spec_resolved=spec_resolved, target=target)
    if settings is not None:
        run.record_request_settings(settings)
    records = list(requests)
    for record in records:
        run.append_request(record)
    for step in steps:
        run.append_step(step)
    if summary == "computed":
        run.write_summary(summarize_requests(records_frame(records)))
    elif summary is not None:
        run.write_summary(summary)
    end_run(run, end)
    return run


def end_run(run: RunWriter, end: End) -> None:
    """End ``run`` as ``end`` says: a status (with the reason a real run would give), a
    function of the run, or None (left running)."""
    if callable(end):
        end(run)
    elif end == "complete":
        run.complete()
    elif end == "aborted":
        run.abort(END_REASONS[end])
    elif end == "invalid":
        run.invalidate(END_REASONS[end])
    elif end == "failed":
        run.fail(END_REASONS[end])
