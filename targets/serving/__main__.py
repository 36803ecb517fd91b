"""``python -m moeperf.targets.serving``: serve the reference engine until SIGTERM or SIGINT.

Prints exactly one line to stdout, ``READY http://HOST:PORT``, once listening, so a parent
process can start it with ``--port 0`` and read the port it got. A bad config or model
directory is a message on stderr and exit code 2; a port that cannot be bound, exit 1.

Knobs come from ``--config`` (a JSON object of ``ReferenceTargetConfig`` fields), then the
flags, which override it. ``--help`` shows every knob's default, the engine's own; the
default benchmark's spec sets some of them differently (it runs MTP with 2 drafts). The
wire-variant flags (``--no-done``, ``--usage``, ``--role-chunk``,
``--reject-unknown-fields``) make it stream as other OpenAI-compatible servers do.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import uvicorn

from moeperf.targets import child_process
from moeperf.targets.openai_wire import USAGE_MODES
from moeperf.targets.ready_line import announce_ready, base_url
from moeperf.targets.serving import auth
from moeperf.targets.serving.config import ReferenceTargetConfig
from moeperf.targets.serving.errors import ReferenceConfigError

EXIT_USAGE = 2
EXIT_LISTEN = 1
PROG = "python -m moeperf.targets.serving"
# Streams still open at shutdown get this long to finish before the engine aborts them.
_GRACEFUL_S = 2

# Flags that override a config field: (flag, field, type, help).
_KNOB_FLAGS: tuple[tuple[str, str, type, str], ...] = (
    ("--max-running-requests", "max_running_requests", int, "requests in the running batch"),
    ("--max-waiting-requests", "max_waiting_requests", int, "queue length before HTTP 429"),
    ("--num-kv-blocks", "num_kv_blocks", int, "KV-cache blocks"),
    ("--block-size", "block_size", int, "tokens per KV-cache block"),
    ("--max-num-batched-tokens", "max_num_batched_tokens", int, "token budget of a step"),
    ("--chunked-prefill-size", "chunked_prefill_size", int, "prompt tokens per step; 0: all"),
    ("--mtp-tokens", "mtp_tokens", int, "MTP draft tokens per step (0: no speculation)"),
    ("--max-context-len", "max_context_len", int, "prompt + output tokens"),
    ("--dtype", "dtype", str, "float32 or bfloat16"),
    ("--threads", "threads", int, "torch intra-op threads (0: torch's default)"),
    ("--served-model-name", "served_model_name", str, "the model name the API answers to"),
    ("--seed", "seed", int, "seed of unseeded sampled requests"),
    ("--max-body-bytes", "max_body_bytes", int, "largest request body (HTTP 413 above)"),
    ("--body-read-timeout-s", "body_read_timeout_s", float, "time for a whole request body"),
    ("--write-timeout-s", "write_timeout_s", float, "a write stalled this long drops the client"),
)


# Flags of their own kind (on/off, a choice) that override a config field too.
_SWITCH_FIELDS = (
    "enable_prefix_caching",
    "allow_long_max_model_len",
    "send_done",
    "usage",
    "role_chunk",
    "reject_unknown_fields",
)


class _DefaultsShown(argparse.RawDescriptionHelpFormatter):
    """Appends "(default: X)" to flags with a default of their own. The knob flags default
    to None (unset: ``--config`` or the engine decides), so their help states the
    engine's default itself (``_knob_help``)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default in (None, False, argparse.SUPPRESS) or "%(default)" in text:
            return text
        return f"{text} (default: %(default)s)"


def _knob_help(field: str, text: str) -> str:
    """``text`` with the engine's default of ``field`` (``ReferenceTargetConfig``)."""
    default = ReferenceTargetConfig.model_fields[field].default
    # argparse %-formats help strings: a literal % must be doubled.
    return f"{text} (default: {default})".replace("%", "%%")


_EPILOG = """\
Defaults are the engine's own: MTP off (--mtp-tokens 0), prefix caching on. The default
benchmark (`moeperf run default`) starts this server with the knobs of its spec's
[target.reference] table (suites/specs/default.toml), MTP with 2 draft tokens among them:
pass the same flags (--mtp-tokens 2 ...) to serve it the way the benchmark measures it."""


def _parser(prog: str = PROG) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="The reference MoE serving engine behind an OpenAI-compatible API.",
        epilog=_EPILOG,
        formatter_class=_DefaultsShown,
    )
    parser.add_argument(
        "--model",
        default=None,
        metavar="DIR",
        help="model directory (default: the shipped targets/model/default)",
    )
    child_process.add_listen_flags(
        parser,
        host_help="address to bind",
        default_port=8000,
        config_help="ReferenceTargetConfig fields as a JSON object, e.g. '{\"mtp_tokens\": 2}'",
    )
    for flag, field, kind, help_text in _KNOB_FLAGS:
        metavar = "N" if kind is int else field.split("_")[-1].upper()
        parser.add_argument(
            flag,
            dest=field,
            type=kind,
            default=None,
            metavar=metavar,
            help=_knob_help(field, help_text),
        )
    parser.add_argument(
        "--enable-prefix-caching",
        action=argparse.BooleanOptionalAction,
        default=None,
        help=_knob_help("enable_prefix_caching", "reuse the KV cache of shared prompt prefixes"),
    )
    parser.add_argument(
        "--allow-long-max-model-len",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="--max-context-len may exceed the model's max_position_embeddings (positions "
        "past it are extrapolated: timings and memory real, outputs not meaningful)",
    )
    _add_wire_flags(parser.add_argument_group("wire variant (stream as other servers do)"))
    auth.add_api_key_flag(parser)
    child_process.add_exit_with_parent_flag(parser)
    return parser


def _add_wire_flags(group: argparse._ArgumentGroup) -> None:
    # Unset (None) leaves the field to --config, as the knob flags do.
    group.add_argument(
        "--no-done",
        dest="send_done",
        action="store_const",
        const=False,
        default=None,
        help="end a stream after its finish_reason chunk, without data: [DONE]",
    )
    group.add_argument(
        "--usage",
        choices=USAGE_MODES,
        default=None,
        help=_knob_help(
            "usage",
            "as_requested: honour stream_options; end_only: usage on the finish_reason "
            "chunk only; never: no usage",
        ),
    )
    group.add_argument(
        "--role-chunk",
        action=argparse.BooleanOptionalAction,
        default=None,
        help=_knob_help("role_chunk", "chat streams start with a role-only chunk"),
    )
    group.add_argument(
        "--reject-unknown-fields",
        action="store_const",
        const=True,
        default=None,
        help="HTTP 422 for request fields OpenAI does not document (ignore_eos, top_k, ...)",
    )


def _config(args: argparse.Namespace) -> ReferenceTargetConfig:
    fields: dict[str, Any] = {}
    if args.config is not None:
        fields = ReferenceTargetConfig.from_json(args.config).model_dump(exclude_unset=True)
    if args.model is not None:
        fields["model_dir"] = args.model
    for name in [field for _, field, _, _ in _KNOB_FLAGS] + list(_SWITCH_FIELDS):
        value = getattr(args, name)
        if value is not None:
            fields[name] = value
    return ReferenceTargetConfig.from_fields(fields)


def _bind(host: str, port: int) -> socket.socket:
    # Bound here, not by uvicorn: the port is known before serving starts, and a port in
    # use is an OSError to report rather than uvicorn's sys.exit inside the event loop.
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


class _Server(uvicorn.Server):
    # uvicorn's own handlers re-raise the signal after shutdown (the process then dies of
    # it); ours stop the server and let main() return its exit code.
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def _serve(app: Any, sock: socket.socket, parent_pid: int | None) -> None:
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=_GRACEFUL_S,
    )
    server = _Server(config)
    watcher = child_process.stop_on_signals(
        lambda: server.should_exit, lambda: setattr(server, "should_exit", True), parent_pid
    )
    serving = asyncio.get_running_loop().create_task(server.serve(sockets=[sock]))
    while not server.started and not serving.done():
        await asyncio.sleep(0.01)
    if server.started:
        host, port = sock.getsockname()[:2]
        announce_ready(base_url(host, port))
    await serving
    if watcher is not None:
        watcher.cancel()


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    """Parse the arguments, load the model, serve until signalled; the exit code.
    ``prog`` is the command named in usage and help (``moeperf target serve`` there)."""
    args = _parser(prog).parse_args(argv)
    # Taken first: the parent may die while the model loads, and then getppid() is another.
    parent_pid = os.getppid() if args.exit_with_parent else None
    try:
        config = _config(args)
        key = auth.api_key(args.api_key, os.environ)
        if (bad_port := child_process.port_error(args.port)) is not None:
            raise ReferenceConfigError(bad_port)
        # After the config: a typo in a knob is reported before the model loads.
        from moeperf.targets.serving.factory import create_app

        app = create_app(config, api_key=key)
    except ReferenceConfigError as exc:
        print(f"reference target: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        sock = _bind(args.host, args.port)
    except OSError as exc:
        print(f"reference target: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return EXIT_LISTEN
    with sock, asyncio.Runner(loop_factory=child_process.event_loop_factory()) as runner:
        runner.run(_serve(app, sock, parent_pid))
    return 0


if __name__ == "__main__":
    sys.exit(main())
