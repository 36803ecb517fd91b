"""``[mtp_ab]`` against url targets: one server per arm (``mtp_ab.urls``), and one server
with a shell command per arm (``mtp_ab.hooks``) run before each of that arm's blocks.

The servers are reference targets moeperf does not start for the run (``moeperf target
serve`` processes), so the suite sees them as any server: through HTTP, /tokenize and the
reference dialect of /metrics.
"""

from __future__ import annotations

import functools
import json
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from moeperf.cli import main
from moeperf.collectors.serving_records import ServingSummary
from moeperf.collectors.store import RunStore
from moeperf.suites.serving.embedded.process import running_target
from moeperf.suites.serving.mtp_ab.run import SEVERAL_TARGETS

DCGM_PAGE = Path(__file__).resolve().parents[1] / "data" / "accel" / "dcgm_exporter_h200x2.prom"


@contextmanager
def dcgm_exporter(root: Path) -> Iterator[str]:
    """The recorded DCGM exporter page at http://127.0.0.1:PORT/metrics (http.server)."""
    served = root / "dcgm"
    served.mkdir()
    shutil.copyfile(DCGM_PAGE, served / "metrics")
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(served))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()


SERVER = {"threads": 1, "enable_prefix_caching": False, "max_running_requests": 8}
SMALL = [
    "--set", "target.kind='url'", "--set", "target.api='completions'",
    "--set", "workload.tokenizer='server'", "--set", "mtp_ab.drafts=[0, 2]",
    "--set", "workload.output_tokens.mean=16",
    "--set", "load.levels=[2]", "--set", "load.duration_s=3.0", "--set", "load.warmup_s=0.2",
    "--set", "load.cooldown_s=0.2", "--set", "mtp_ab.equality_prompts=4",
    "--set", "harness.max_loop_lag_p99_s=1.0", "--set", "harness.max_cpu_fraction=1.0",
]  # fmt: skip
# A request's phase is set by when it was sent: 48 tokens without MTP took longer than a
# 1.5 s window on CI's host, so every off-arm request fell in cool-down and the level had
# none measured. 16 tokens in 3 s leaves several requests per stream inside the window.


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[str, str]]:
    """An MTP-off and a k=2 server, shared by the tests: each reads only counter
    increases over its own blocks and greedy outputs, which earlier runs do not change
    (prefix caching off)."""
    with (
        running_target("moeperf.targets.serving", {**SERVER, "mtp_tokens": 0}, 180.0) as off,
        running_target("moeperf.targets.serving", {**SERVER, "mtp_tokens": 2}, 180.0) as two,
    ):
        yield off, two


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_one_server_per_arm(servers, tmp_path, capsys):
    off, two = servers
    with dcgm_exporter(tmp_path) as dcgm:
        code = main([
            "--runs-dir", str(tmp_path), "run", "mtp-ab", *SMALL,
            "--set", f"target.url='{off}'", "--set", f"mtp_ab.urls={json.dumps([off, two])}",
            "--set", "mtp_ab.blocks=1", "--set", "mtp_ab.modes=['greedy']",
            # The arms' GPUs, as a DCGM exporter's recorded page gives them (no GPU here).
            "--set", "telemetry.sources=['dcgm', 'process']",
            "--set", f"telemetry.dcgm_url='{dcgm}'",
        ])  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 0, printed[-3000:]
    reader = RunStore(tmp_path).open("latest")
    summary = reader.summary()
    assert isinstance(summary, ServingSummary) and summary.mtp_ab is not None
    ab = summary.mtp_ab
    assert ab.equality is not None and ab.equality.passed
    arms = {a.drafts: a for a in ab.arm_levels}
    assert arms[0].draft_tokens == 0  # the off server drafted nothing over its block
    assert arms[2].tokens_per_step is not None and arms[2].tokens_per_step > 1.5
    assert reader.manifest.target["arms"]["urls"] == [off, two]
    # Each block has its accelerators' figures: the page's power, its counters unchanged
    # (a recorded page: 0 J), and no process of ours to watch.
    for block in ab.blocks:
        figures = summary.scenarios[block.scenario].accelerator
        assert figures is not None, block.scenario
        assert figures.power_mean_w == pytest.approx(612.345 + 487.12)
        assert figures.energy_j == 0 and figures.energy_source == "counter"
    telemetry = summary.telemetry
    assert telemetry is not None
    assert [(s.source, s.unavailable) for s in telemetry.sources] == [
        ("dcgm", None),
        ("process", SEVERAL_TARGETS),
    ]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_hooks_run_before_each_block_of_their_arm(servers, tmp_path, capsys):
    _, url = servers
    log = tmp_path / "hooks.log"
    hooks = [f"echo off >> {log}", f"echo k2 >> {log}"]
    code = main([
        "--runs-dir", str(tmp_path / "runs"), "run", "mtp-ab", *SMALL,
        "--set", f"target.url='{url}'", "--set", f"mtp_ab.hooks={json.dumps(hooks)}",
        "--set", "mtp_ab.blocks=2", "--set", "mtp_ab.modes=['greedy']",
    ])  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 0, printed[-3000:]
    # Equality first (each arm once), then the blocks: A B, B A.
    assert log.read_text().split() == ["off", "k2", "off", "k2", "k2", "off"]
    manifest = RunStore(tmp_path / "runs").open("latest").manifest
    assert manifest.target["arms"]["hooks"] is True  # the commands are not stored
    assert str(log) not in json.dumps(manifest.target)

    failing = [f"echo off >> {log}", "echo reconfigure failed >&2; exit 3"]
    code = main([
        "--runs-dir", str(tmp_path / "runs"), "run", "mtp-ab", *SMALL,
        "--set", f"target.url='{url}'", "--set", f"mtp_ab.hooks={json.dumps(failing)}",
        "--set", "mtp_ab.blocks=1", "--set", "mtp_ab.modes=['greedy']",
    ])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 2
    assert (
        "the mtp_ab hook of the k=2 arm exited 3: reconfigure failed" in captured.err + captured.out
    )
