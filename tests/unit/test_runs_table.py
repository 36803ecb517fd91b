"""``moeperf runs list``: what each run measured, and its whole status (issue 11, item 10).

An embedded target's URL is a port on 127.0.0.1 that was gone when the run ended, so the
table shows the target's kind and model instead; a status reason is never cut.
"""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console

from moeperf.collectors.manifest import RunManifest
from moeperf.reports.terminal.runs_table import runs_table, target_label

REASON = (
    "client was the bottleneck at c=256: event-loop lag p99 8.48 ms exceeds 2 ms; "
    "client CPU 93% exceeds 90%; the numbers may be the client's, not the target's"
)


def manifest(n: int, target: dict[str, Any], **fields: Any) -> RunManifest:
    base: dict[str, Any] = dict(
        run_id=f"20260101-000000-00000{n}-serving-abc12{n}",
        suite="serving",
        anchor_monotonic_ns=0,
        anchor_wall_time="2026-01-01T00:00:00.000+00:00",
        host={},
        target=target,
        status="complete",
    )
    base.update(fields)
    return RunManifest(**base)


def rendered(manifests: list[RunManifest], width: int) -> str:
    out = io.StringIO()
    Console(file=out, width=width).print(runs_table(manifests))
    return out.getvalue()


RUNS = [
    manifest(1, {"kind": "synthetic", "url": "http://127.0.0.1:41234", "model": "synthetic"}),
    manifest(2, {"kind": "reference", "url": "http://127.0.0.1:39999", "model": "tiny-moe"}),
    manifest(3, {"kind": "url", "url": "http://10.0.0.5:8000", "model": "Qwen3-30B-A3B"}),
    manifest(4, {"kind": "training-reference", "model": None}, suite="training"),
    manifest(5, {"kind": "synthetic", "url": "http://127.0.0.1:1"}, status="invalid",
             status_reason=REASON),
]  # fmt: skip


def test_embedded_targets_show_their_kind_and_model_not_a_dead_port():
    assert target_label(RUNS[0].target) == "synthetic synthetic"
    assert target_label(RUNS[1].target) == "reference tiny-moe"
    assert target_label(RUNS[2].target) == "http://10.0.0.5:8000 Qwen3-30B-A3B"
    assert target_label(RUNS[3].target) == "training-reference"
    text = rendered(RUNS, 160)
    assert "127.0.0.1" not in text
    assert "reference tiny-moe" in text and "http://10.0.0.5:8000" in text


def test_the_status_reason_is_shown_whole_at_any_width():
    for width in (160, 100):
        text = rendered(RUNS, width)
        assert "…" not in text, width  # rich's ellipsis: nothing cut
        for word in ("invalid:", *REASON.split()):
            assert word in text, (width, word)
        for m in RUNS:
            assert m.run_id in text, (width, m.run_id)  # the id is never wrapped
        # Every column fits: the target column is not pushed off the right edge.
        assert all(len(line) <= width for line in text.splitlines())
        assert text.count("┓") == 1 and "Qwen3-30B-A3" in text
