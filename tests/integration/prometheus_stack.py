"""A real Prometheus server, Pushgateway and ``promtool`` for integration tests.

Plain classes and functions; the pytest fixtures that wrap them live in ``conftest.py`` next to
this file (``pushgateway``, ``prometheus``, ``prometheus_factory``, ``promtool``).

The binaries come from the Debian packages (``apt-get install prometheus
prometheus-pushgateway``). Every process listens on 127.0.0.1 on a free port, keeps its config,
data and log in a directory the caller owns (a pytest tmp dir), and never touches the packages'
default ports (9090, 9091) or their state under /var/lib/prometheus: a daemon that the package
install may have started is not used and is not in the way.

Prometheus is started with a generated config (written as JSON, which is valid YAML) and
``--web.enable-lifecycle``, so scrape targets known only after it started (a server on an
ephemeral port) are added with :meth:`PrometheusServer.set_targets`, which rewrites the config and
POSTs ``/-/reload``.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

HOST = "127.0.0.1"
INSTALL_HINT = (
    "install the Debian packages: "
    "apt-get install -y --no-install-recommends prometheus prometheus-pushgateway"
)
STARTUP_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
# Jobs whose scrape config gets ``honor_labels: true`` unless the caller says otherwise: the
# Pushgateway's pushed ``job``/``instance`` labels must win over the scrape's own.
PUSHGATEWAY_JOB = "pushgateway"

_running: set[_Process] = set()


def in_ci() -> bool:
    """True when the ``CI`` environment variable says so (``true``/``1``/``yes``)."""
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def find_binary(name: str) -> str | None:
    """The path of executable ``name`` on PATH (or in /usr/bin, where Debian puts it), else None."""
    found = shutil.which(name)
    if found:
        return found
    fallback = Path("/usr/bin") / name
    if fallback.is_file() and os.access(fallback, os.X_OK):
        return str(fallback)
    return None


def require_binary(name: str) -> str:
    """The path of ``name``; skip the calling test when missing, but fail it under ``CI=true``.

    In CI a missing binary means the install step broke, which must not pass as a skip.
    """
    path = find_binary(name)
    if path is not None:
        return path
    message = f"{name!r} not found on PATH; {INSTALL_HINT}"
    if in_ci():
        pytest.fail(f"CI=true and {message}", pytrace=False)
    pytest.skip(message)


def free_port() -> int:
    """A loopback TCP port nothing listens on right now (bound to port 0, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _http(
    method: str, url: str, data: bytes | None = None, timeout: float = 5.0
) -> tuple[int, bytes]:
    """(status, body) of one request; HTTP error statuses are returned, not raised."""
    request = urllib.request.Request(url, data=data, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as e:
        with contextlib.closing(e):
            return e.code, e.read()


def _tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as e:
        return f"(no log: {e})"
    return "\n".join(text.splitlines()[-lines:]) or "(empty log)"


class StartupError(RuntimeError):
    """A server process exited or did not become ready in time."""


class _Process:
    """One server subprocess on 127.0.0.1:<free port>; output goes to ``<workdir>/<name>.log``."""

    name = "process"
    binary = ""

    def __init__(self, workdir: Path, startup_timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.startup_timeout_s = startup_timeout_s
        self.log_path = self.workdir / f"{self.name}.log"
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        """``127.0.0.1:<port>``, the form a scrape target takes."""
        return f"{HOST}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def _args(self, executable: str) -> list[str]:
        raise NotImplementedError

    def start(self) -> None:
        """Start and wait for ``/-/ready``; retry on a new port if the chosen one got taken."""
        executable = require_binary(self.binary)
        for attempt in range(3):
            self.port = free_port()
            logged = self.log_path.stat().st_size if self.log_path.exists() else 0
            try:
                self._start_once(executable)
                return
            except StartupError:
                self.stop()
                with self.log_path.open("rb") as log:
                    log.seek(logged)
                    in_use = b"address already in use" in log.read()
                if not in_use or attempt == 2:
                    raise

    def _start_once(self, executable: str) -> None:
        args = self._args(executable)
        with self.log_path.open("ab") as log:
            log.write(f"$ {' '.join(args)}\n".encode())
            log.flush()
            self._proc = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                start_new_session=True,  # a Ctrl-C in the terminal is ours to forward
            )
        _running.add(self)
        deadline = time.monotonic() + self.startup_timeout_s
        last = "no answer yet"
        while True:
            code = self._proc.poll()
            if code is not None:
                raise StartupError(
                    f"{self.name} exited with status {code} before it was ready "
                    f"(on {self.address}); last log lines from {self.log_path}:\n"
                    f"{_tail(self.log_path)}"
                )
            try:
                status, body = _http("GET", f"{self.url}/-/ready", timeout=1.0)
                if status == 200:
                    return
                last = f"HTTP {status}: {body[:200]!r}"
            except OSError as e:
                last = repr(e)
            if time.monotonic() > deadline:
                raise StartupError(
                    f"{self.name} not ready on {self.url} after {self.startup_timeout_s:.0f} s "
                    f"({last}); last log lines from {self.log_path}:\n{_tail(self.log_path)}"
                )
            time.sleep(0.05)

    def stop(self) -> None:
        """SIGTERM, wait, then SIGKILL; idempotent."""
        proc, self._proc = self._proc, None
        _running.discard(self)
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=STOP_TIMEOUT_S)

    def log_tail(self, lines: int = 30) -> str:
        return _tail(self.log_path, lines)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@atexit.register
def _stop_all() -> None:
    """Last resort for an interpreter exit that skipped the fixtures' teardown."""
    for process in list(_running):
        with contextlib.suppress(Exception):
            process.stop()


class PushgatewayServer(_Process):
    """``prometheus-pushgateway`` on 127.0.0.1, metrics in memory only (no persistence file)."""

    name = "pushgateway"
    binary = "prometheus-pushgateway"

    def _args(self, executable: str) -> list[str]:
        return [
            executable,
            f"--web.listen-address={self.address}",
            # Debian's default persists to /var/lib/prometheus/pushgateway.data: keep it in memory.
            "--persistence.file=",
            "--log.level=warn",
        ]

    def metrics_text(self) -> str:
        """The Pushgateway's own ``/metrics`` (what Prometheus scrapes from it)."""
        status, body = _http("GET", f"{self.url}/metrics")
        if status != 200:
            raise RuntimeError(f"GET {self.url}/metrics: HTTP {status}: {body[:500]!r}")
        return body.decode()


class PrometheusQueryError(RuntimeError):
    """The Prometheus HTTP API answered with ``status: error`` (or not with JSON)."""


class PrometheusServer(_Process):
    """``prometheus`` on 127.0.0.1 with a generated config and a TSDB under ``workdir``.

    ``jobs`` maps a job name to its ``host:port`` targets. Jobs named in ``honor_labels`` (by
    default the one named ``pushgateway``) get ``honor_labels: true``.
    """

    name = "prometheus"
    binary = "prometheus"

    def __init__(
        self,
        workdir: Path,
        jobs: Mapping[str, Sequence[str]] | None = None,
        *,
        scrape_interval: str = "1s",
        honor_labels: Iterable[str] = (PUSHGATEWAY_JOB,),
        startup_timeout_s: float = STARTUP_TIMEOUT_S,
    ) -> None:
        super().__init__(workdir, startup_timeout_s)
        self.scrape_interval = scrape_interval
        self.honor_labels = set(honor_labels)
        self.jobs: dict[str, list[str]] = {k: list(v) for k, v in (jobs or {}).items()}
        self.config_path = self.workdir / "prometheus.yml"
        self.data_path = self.workdir / "data"

    # -- configuration -----------------------------------------------------------------------

    def config(self) -> dict[str, Any]:
        """The config as a dict (written out as JSON, which Prometheus's YAML parser reads)."""
        return {
            "global": {
                "scrape_interval": self.scrape_interval,
                "scrape_timeout": self.scrape_interval,
                "evaluation_interval": self.scrape_interval,
            },
            "scrape_configs": [
                {
                    "job_name": job,
                    "honor_labels": job in self.honor_labels,
                    "static_configs": [{"targets": list(targets)}],
                }
                for job, targets in self.jobs.items()
            ],
        }

    def _write_config(self) -> None:
        tmp = self.config_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.config(), indent=2) + "\n")
        tmp.replace(self.config_path)

    def _args(self, executable: str) -> list[str]:
        self._write_config()
        return [
            executable,
            f"--config.file={self.config_path}",
            f"--storage.tsdb.path={self.data_path}",
            f"--web.listen-address={self.address}",
            "--web.enable-lifecycle",
            "--log.level=warn",
        ]

    def set_targets(
        self,
        jobs: Mapping[str, Sequence[str]],
        *,
        honor_labels: Iterable[str] | None = None,
    ) -> None:
        """Replace all scrape jobs and reload the running server (``POST /-/reload``).

        Prometheus applies new targets asynchronously (its target discovery batches updates,
        up to ~5 s); use :meth:`wait_for_targets` or :meth:`wait_for` before relying on them.
        """
        previous = self.jobs, self.honor_labels
        self.jobs = {job: list(targets) for job, targets in jobs.items()}
        if honor_labels is not None:
            self.honor_labels = set(honor_labels)
        self._write_config()
        if self._proc is None:
            return
        status, body = _http("POST", f"{self.url}/-/reload", data=b"", timeout=30.0)
        if status != 200:
            # The server keeps running the old config: so do we, and so does the file.
            rejected = self.config_path.read_text()
            self.jobs, self.honor_labels = previous
            self._write_config()
            raise RuntimeError(
                f"Prometheus rejected the new config (HTTP {status}): "
                f"{body.decode(errors='replace').strip()}\nrejected config:\n{rejected}"
            )

    # -- HTTP API ----------------------------------------------------------------------------

    def api(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        """``data`` of ``GET /api/v1/<path>``; raises :class:`PrometheusQueryError` on error."""
        url = f"{self.url}/api/v1/{path.lstrip('/')}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        status, body = _http("GET", url, timeout=30.0)
        try:
            reply = json.loads(body)
        except ValueError as e:
            raise PrometheusQueryError(f"GET {url}: HTTP {status}, not JSON: {body[:500]!r}") from e
        if reply.get("status") != "success":
            raise PrometheusQueryError(
                f"GET {url}: HTTP {status}: {reply.get('errorType', '?')}: {reply.get('error')}"
            )
        return reply["data"]

    def query(self, expr: str, time: float | str | None = None) -> list[dict[str, Any]]:
        """Instant query: the ``result`` list (``{"metric": {...}, "value": [ts, "v"]}`` each).

        A scalar or string result comes back as one item with empty ``metric``.
        """
        params: dict[str, Any] = {"query": expr}
        if time is not None:
            params["time"] = time
        data = self.api("query", params)
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        return data["result"]

    def query_value(self, expr: str, time: float | str | None = None) -> float:
        """The value of an instant query that must return exactly one sample."""
        result = self.query(expr, time)
        if len(result) != 1:
            raise AssertionError(f"{expr!r} returned {len(result)} series, not 1: {result}")
        return float(result[0]["value"][1])

    def wait_for(self, expr: str, timeout_s: float = 15.0) -> list[dict[str, Any]]:
        """Poll ``query(expr)`` until it returns a non-empty result; that result.

        A PromQL comparison (``metric > 3``) waits for a value. On timeout, raises
        ``TimeoutError`` with the scrape targets' state and the server's log tail.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            result = self.query(expr)
            if result:
                return result
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{expr!r} still empty after {timeout_s} s on {self.url}; "
                    f"targets: {self._targets_summary()}; log tail:\n{self.log_tail(10)}"
                )
            time.sleep(0.2)

    def targets(self) -> list[dict[str, Any]]:
        """The active targets from ``/api/v1/targets`` as the API gives them."""
        return self.api("targets", {"state": "active"})["activeTargets"]

    def targets_up(self) -> dict[str, list[str]]:
        """Job name -> the ``host:port`` of its targets whose last scrape succeeded."""
        up: dict[str, list[str]] = {}
        for target in self.targets():
            if target.get("health") == "up":
                job = target["labels"].get("job") or target.get("scrapePool", "")
                up.setdefault(job, []).append(target["discoveredLabels"]["__address__"])
        return up

    def wait_for_targets(self, timeout_s: float = 15.0) -> dict[str, list[str]]:
        """Wait until every configured target is up; :meth:`targets_up` then."""
        deadline = time.monotonic() + timeout_s
        while True:
            up = self.targets_up()
            missing = {
                job: sorted(set(targets) - set(up.get(job, ())))
                for job, targets in self.jobs.items()
            }
            if not any(missing.values()):
                return up
            if time.monotonic() > deadline:
                down = {job: targets for job, targets in missing.items() if targets}
                raise TimeoutError(
                    f"targets not up after {timeout_s} s: {down}; "
                    f"targets: {self._targets_summary()}"
                )
            time.sleep(0.2)

    def _targets_summary(self) -> str:
        try:
            return str(
                [
                    (
                        t["labels"].get("job"),
                        t["discoveredLabels"]["__address__"],
                        t["health"],
                        t.get("lastError", ""),
                    )
                    for t in self.targets()
                ]
            )
        except Exception as e:  # a diagnostic only: never hide the real failure
            return f"(unavailable: {e!r})"


def promtool_check_metrics(text: str, timeout_s: float = 30.0) -> tuple[bool, str]:
    """Pipe a text exposition into ``promtool check metrics``: (passed, stdout + stderr).

    promtool exits 0 when clean, 3 on lint problems (e.g. a counter without ``_total``) and 1
    when the text does not parse.
    """
    executable = require_binary("promtool")
    done = subprocess.run(
        [executable, "check", "metrics"],
        input=text.encode(),
        capture_output=True,
        timeout=timeout_s,
        check=False,
    )
    output = (done.stdout + done.stderr).decode(errors="replace").strip()
    return done.returncode == 0, output
