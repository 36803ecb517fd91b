"""A load worker whose harness is gone ends itself."""

from __future__ import annotations

import os
import time

# How often a worker checks that the harness that started it is still there.
PARENT_POLL_S = 0.5


# The exit status of a worker that ended because the harness was gone.
ORPHANED_EXIT = 3


def exit_when_orphaned(parent_pid: int) -> None:
    """End this process at once when the harness that started it is gone.

    A harness killed outright (SIGKILL, the OOM killer) cannot set ``stop`` or send None,
    and a daemon process is only ended by its parent's own exit handlers: without this a
    worker would go on sending load to the target and wait for commands forever. Being
    re-parented is the sign (as in targets/child_process.py); ``parent_pid`` is the pid the
    parent recorded, so a parent that died before this thread started is seen too. There is
    no one left to send records to, so nothing is flushed: ``os._exit``, because a normal exit
    would wait for the results queue's feeder, which nobody reads any more.
    """
    while os.getppid() == parent_pid:
        time.sleep(PARENT_POLL_S)
    os._exit(ORPHANED_EXIT)
