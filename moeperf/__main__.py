"""``python -m moeperf``: the moeperf command line."""

import sys

from moeperf.cli import main

sys.exit(main())
