"""Benchmark scripts (``python -m moeperf.bench.NAME``, the ``tox -e bench-*`` envs): each
measures one part of moeperf or its reference targets and prints a table."""
