"""The Locust engine: the same specs, records and reports as the asyncio engine, with
load from Locust workers (local processes or other machines) under a Locust master.

Everything in this package runs in gevent-patched processes (the master and its workers),
never in the moeperf process itself: ``suites/serving/locust_pool.py`` is the harness's
side, and speaks to the master through its stdin and stdout.
"""
