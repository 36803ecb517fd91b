"""The documentation site's reference pages, generated from the code.

Each page under docs/reference/ (and docs/concepts/metrics.md) is written by one module
here from what the code already knows: the CLI's argument parser, the spec models, the
shipped specs, the metric names, the record schemas and summary records, the exit codes,
and the docstrings the report's appendix quotes. ``python -m moeperf.docs`` writes them;
``python -m moeperf.docs --check`` (and tests/unit/test_docs_reference.py) fails when one
is out of date, naming the command that regenerates it.
"""
