"""A background thread that steps the engine while it has work.

PyTorch releases the GIL inside its kernels, so the HTTP server's event loop keeps
streaming while a step computes.
"""

from __future__ import annotations

import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import Future

from moeperf.targets.serving.engine.api import EngineStats, RequestOutput, SamplingParams
from moeperf.targets.serving.engine.engine import Engine

_IDLE_WAIT_S = 0.5  # how often an idle loop looks at its stop flag


class EngineLoop:
    def __init__(self, engine: Engine):
        self.engine = engine
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="engine-loop", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop stepping; requests still in flight end with finish reason "abort"."""
        self.engine.abort_all()
        self._stop.set()
        self._thread.join(timeout_s)
        if not self._thread.is_alive():
            self.engine.step()  # deliver the aborts; the loop thread is gone, so it is safe

    def add_request(
        self,
        request_id: str,
        prompt_token_ids: Sequence[int],
        params: SamplingParams,
        on_output: Callable[[RequestOutput], None],
    ) -> None:
        self.engine.add_request(request_id, prompt_token_ids, params, on_output)

    def abort_request(self, request_id: str) -> None:
        self.engine.abort_request(request_id)

    def request_prefix_cache_reset(self) -> Future[int]:
        """Applied by the loop's next step; the future gets the cached blocks dropped."""
        return self.engine.request_prefix_cache_reset()

    def reset_prefix_cache(self, timeout_s: float | None = None) -> int:
        """Waits for the loop's next step to apply it, so not on the event loop."""
        return self.engine.reset_prefix_cache(timeout_s)

    def stats(self) -> EngineStats:
        return self.engine.stats()

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self.engine.has_work():
                self.engine.wait_for_work(_IDLE_WAIT_S)
                continue
            try:
                self.engine.step()
            except Exception:  # an engine bug must not leave clients waiting forever
                traceback.print_exc(file=sys.stderr)
                self.engine.fail_all()
