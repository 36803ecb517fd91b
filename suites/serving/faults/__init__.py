"""Fault drills (``[drill]`` in a serving spec): faults injected into a running level, and
what the requests saw of them."""
