"""``python -m targets.synthetic``: run the synthetic server until SIGTERM or SIGINT.

Prints exactly one line to stdout, ``READY http://127.0.0.1:<port>``, once listening, so
a parent process can start it with ``--port 0`` and read the port it got. A bad config
is a message on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

from targets.child_process import event_loop_factory, stop_when_orphaned
from targets.synthetic.config import SyntheticConfig
from targets.synthetic.server import RunningServer, require_loopback, serve

EXIT_USAGE = 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m targets.synthetic",
        description="OpenAI-compatible streaming server with known latencies (ground truth).",
    )
    parser.add_argument("--host", default="127.0.0.1", help="loopback address to bind")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument(
        "--config",
        default=None,
        metavar="JSON",
        help="SyntheticConfig fields as a JSON object, e.g. '{\"ttft_s\": 0.1}'",
    )
    parser.add_argument("--ttft-s", type=float, default=None, help="overrides the config")
    parser.add_argument("--itl-s", type=float, default=None, help="overrides the config")
    parser.add_argument("--tokens-per-chunk", type=int, default=None, help="overrides too")
    parser.add_argument(
        "--exit-with-parent",
        action="store_true",
        help="stop when the process that started this one is gone (no orphaned servers)",
    )
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
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    if exit_with_parent:
        watcher = loop.create_task(stop_when_orphaned(os.getppid(), stop.is_set, stop.set))

    def ready(server: RunningServer) -> None:
        print(f"READY {server.url}", flush=True)

    await serve(config, host, port, on_ready=ready, stop=stop)
    if exit_with_parent:
        watcher.cancel()


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the arguments, serve until signalled; the exit code."""
    args = _parser().parse_args(argv)
    try:
        config = _config(args)
        require_loopback(args.host)
        if not 0 <= args.port <= 65535:
            raise ValueError(f"--port must be in [0, 65535]; got {args.port}")
    except ValueError as exc:
        print(f"synthetic: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
            runner.run(_run(config, args.host, args.port, args.exit_with_parent))
    except OSError as exc:  # e.g. the port is taken
        print(f"synthetic: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
