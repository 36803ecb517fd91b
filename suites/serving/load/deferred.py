"""The stream results a level leaves for client-side token counts, spooled to disk.

Client-side counts are computed after the level (a tokenizer served by the target must
not add load to it), so every answer's chunk texts wait until the level ends. Kept in
memory they grow with the level's length (~3.5 KiB per request with 16 output tokens:
a long soak at hundreds of requests/s would hold gigabytes); here each result is pickled
to an anonymous temporary file as it ends (a few microseconds, no flush on the hot path)
and read back in batches, so a worker's memory stays that of one batch.
"""

from __future__ import annotations

import pickle
import tempfile
from collections.abc import Generator

from moeperf.suites.serving.load.stream_state import StreamResult


class DeferredSpool:
    """Append-only spool of ``StreamResult``s, drained batch by batch after a level."""

    def __init__(self) -> None:
        # Unlinked at once by the OS (Linux): a worker that dies leaves no file behind.
        self._file = tempfile.TemporaryFile(prefix="moeperf-deferred-")  # noqa: SIM115
        self.count = 0

    def add(self, result: StreamResult) -> None:
        pickle.dump(result, self._file, protocol=pickle.HIGHEST_PROTOCOL)
        self.count += 1

    def drain(self, batch: int) -> Generator[list[StreamResult], None, None]:
        """Every result added since the last drain, ``batch`` at a time; empties the spool
        (also when the caller stops early)."""
        self._file.flush()
        self._file.seek(0)
        try:
            remaining = self.count
            while remaining:
                size = min(batch, remaining)
                yield [pickle.load(self._file) for _ in range(size)]
                remaining -= size
        finally:
            self._file.seek(0)
            self._file.truncate()
            self.count = 0

    def close(self) -> None:
        self._file.close()
