"""A load worker settles its heap before each level: cycles left by the last level are
collected, and what survives is frozen, so the level's own collections do not walk it."""

from __future__ import annotations

import gc
import weakref

from moeperf.suites.serving.load.worker import _settle_heap


class _Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the cyclic collector frees it


def test_the_last_levels_cycles_are_collected_and_the_survivors_frozen():
    kept = _Node()
    dropped = _Node()
    gone = weakref.ref(dropped)
    del dropped
    try:
        _settle_heap()
        assert gone() is None  # the cycle was garbage: collected
        assert gc.get_freeze_count() > 0
        # Frozen objects are outside every generation: a collection no longer walks them.
        assert not any(obj is kept for obj in gc.get_objects(generation=2))
        # The next level's settle unfreezes first: a frozen object that became cyclic
        # garbage since is collected then.
        survivor = weakref.ref(kept)
        del kept
        _settle_heap()
        assert survivor() is None
    finally:
        gc.unfreeze()
