"""``python -m moeperf.targets.synthetic``: run the synthetic server until SIGTERM or SIGINT.

Prints exactly one line to stdout, ``READY http://127.0.0.1:<port>``, once listening, so
a parent process can start it with ``--port 0`` and read the port it got. A bad config
is a message on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from moeperf.targets import child_process
from moeperf.targets.ready_line import announce_ready
from moeperf.targets.synthetic.config import SyntheticConfig
from moeperf.targets.synthetic.running import RunningServer, require_loopback, serve

EXIT_USAGE = 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m moeperf.targets.synthetic",
        description="OpenAI-compatible streaming server with known latencies (ground truth).",
    )
    child_process.add_listen_flags(
        parser,
        host_help="loopback address to bind",
        default_port=0,
        config_help="SyntheticConfig fields as a JSON object, e.g. '{\"ttft_s\": 0.1}'",
    )
    parser.add_argument("--ttft-s", type=float, default=None, help="overrides the config")
    parser.add_argument("--itl-s", type=float, default=None, help="overrides the config")
    parser.add_argument("--tokens-per-chunk", type=int, default=None, help="overrides too")
    child_process.add_exit_with_parent_flag(parser)
    return parser


def _config(args: argparse.Namespace) -> SyntheticConfig:
    fields: dict[str, Any] = {}
    if args.config is not None:
        try:
            fields = json.loads(args.config)
        except ValueError as exc:
            raise ValueError(f"--config is not valid JSON: {exc}") from None
        if not isinstance(fields, dict):
            raise ValueError("--config must be a JSON object of SyntheticConfig fields")
    for name in ("ttft_s", "itl_s", "tokens_per_chunk"):
        value = getattr(args, name)
        if value is not None:
            fields[name] = value
    return SyntheticConfig.from_dict(fields)


async def _run(config: SyntheticConfig, host: str, port: int, exit_with_parent: bool) -> None:
    stop = asyncio.Event()
    parent_pid = os.getppid() if exit_with_parent else None
    watcher = child_process.stop_on_signals(stop.is_set, stop.set, parent_pid)

    def ready(server: RunningServer) -> None:
        announce_ready(server.url)

    await serve(config, host, port, on_ready=ready, stop=stop)
    if watcher is not None:
        watcher.cancel()


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the arguments, serve until signalled; the exit code."""
    args = _parser().parse_args(argv)
    try:
        config = _config(args)
        require_loopback(args.host)
        if (bad_port := child_process.port_error(args.port)) is not None:
            raise ValueError(bad_port)
    except ValueError as exc:
        print(f"synthetic: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        with asyncio.Runner(loop_factory=child_process.event_loop_factory()) as runner:
            runner.run(_run(config, args.host, args.port, args.exit_with_parent))
    except OSError as exc:  # e.g. the port is taken
        print(f"synthetic: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
