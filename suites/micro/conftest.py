"""Fixtures of the micro-benchmarks (inputs in ``micro_inputs``).

These files are collected only by ``tox -e micro`` (``pytest suites/micro -o
python_files=bench_*.py``): the normal test run's testpaths is ``tests`` and its file
pattern ``test_*.py``, so it never sees them. This folder has no ``__init__.py``, so the
benchmarks are not part of the installed package either; pytest puts it on ``sys.path``,
which is how ``micro_inputs`` is imported.
"""

from __future__ import annotations

import pytest
from micro_inputs import DELIVERIES, delivered, response_events


@pytest.fixture(scope="session")
def events() -> list[bytes]:
    return response_events()


@pytest.fixture(params=DELIVERIES)
def pieces(request: pytest.FixtureRequest, events: list[bytes]) -> list[bytes]:
    return delivered(events, request.param)
