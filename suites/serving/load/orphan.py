"""A load worker whose harness is gone ends itself."""

from __future__ import annotations

import multiprocessing as mp
import os

# The exit status of a worker that ended because the harness was gone.
ORPHANED_EXIT = 3


def exit_when_orphaned() -> None:
    """End this process at once when the harness that started it is gone.

    A harness killed outright (SIGKILL, the OOM killer) cannot set ``stop`` or send None,
    and a daemon process is only ended by its parent's own exit handlers: without this a
    worker would go on sending load to the target and wait for commands forever. The sign is
    multiprocessing's parent sentinel, a pipe only the parent holds open, which reads as
    closed once the parent is gone (however it ended, and also if it ended before this
    thread started). Not the parent pid: a worker forked by a forkserver has the server for
    its parent, not the harness. There is no one left to send records to, so nothing is
    flushed: ``os._exit``, because a normal exit would wait for the results queue's feeder,
    which nobody reads any more.
    """
    parent = mp.parent_process()
    if parent is None:  # not started by multiprocessing: nothing to watch
        return
    parent.join()  # returns when the sentinel closes
    os._exit(ORPHANED_EXIT)
