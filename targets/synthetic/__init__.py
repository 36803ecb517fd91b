"""The ground-truth synthetic target: an OpenAI-compatible server with known latencies.

Used to measure a benchmark client's own measurement error: the server records when it
wrote each chunk (``GET /ground_truth/{id}``), on the host's monotonic clock.
"""

from moeperf.targets.synthetic.config import SyntheticConfig, SyntheticConfigError
from moeperf.targets.synthetic.running import RunningServer, serve, start
from moeperf.targets.synthetic.server import build_app

__all__ = [
    "RunningServer",
    "SyntheticConfig",
    "SyntheticConfigError",
    "build_app",
    "serve",
    "start",
]
