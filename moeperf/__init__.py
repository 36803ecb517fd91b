"""Composition: the ``moeperf`` command line and the benchmark scripts.

The one package that may import every other (suites, reports, dashboards, collectors,
targets) and that none of them imports: commands that run a target and judge the result
in one job live here, and nowhere else.
"""
