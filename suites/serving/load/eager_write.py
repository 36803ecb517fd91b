"""A request's body written in the same loop pass as its headers, on Python 3.11 too.

aiohttp buffers a request's headers and writes them with its body, from a task of its
own (``ClientRequest.write_bytes``). On Python 3.12+ it starts that task eagerly: the
bytes leave at once. On 3.11, which has no eager tasks, the task's first step waits for
the loop's next pass, behind every other stream's ready chunks, and that wait is the
send side of the harness's error (docs/concepts/calibration.md): at 64 streams on the
2-core dev host, send side p50 1.4-2.6 ms with it, 0.37-0.40 ms without.

``install`` gives a 3.11 loop a task factory that runs that one coroutine's first step
at once, as an eager task would, and hands the rest (if it has to wait, for a full
socket buffer) to an ordinary task. Every other coroutine becomes an ordinary task.
"""

from __future__ import annotations

import asyncio
import inspect
import sys
import types
from collections.abc import Coroutine, Generator
from typing import Any

# aiohttp's body writer (aiohttp/client_reqrep.py); tests/unit/test_eager_write.py fails
# if an aiohttp release renames it, rather than the shim doing nothing unseen.
BODY_WRITER = "ClientRequest.write_bytes"


def install(loop: asyncio.AbstractEventLoop) -> bool:
    """Give ``loop`` the factory where it is needed (3.11, no factory of its own yet);
    whether it was given."""
    if sys.version_info >= (3, 12) or loop.get_task_factory() is not None:
        return False
    loop.set_task_factory(_task_factory)
    return True


def _task_factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Future[Any]:
    if getattr(coro, "__qualname__", "") != BODY_WRITER:
        return asyncio.Task(coro, loop=loop, **kwargs)
    context = kwargs.get("context")
    try:
        first = context.run(coro.send, None) if context is not None else coro.send(None)
    except StopIteration as stop:  # written whole at once: the usual case
        done: asyncio.Future[Any] = loop.create_future()
        done.set_result(stop.value)
        return done
    except BaseException as exc:
        failed: asyncio.Future[Any] = loop.create_future()
        failed.set_exception(exc)
        return failed
    task = asyncio.Task(_resumed(coro, first), loop=loop, **kwargs)
    task.add_done_callback(lambda done: _cancel_unresumed(done, coro))
    return task


def _cancel_unresumed(task: asyncio.Future[Any], coro: Coroutine[Any, Any, Any]) -> None:
    """A task cancelled before its first step never reaches ``coro``, which an eager task
    would have cancelled where it waits: do that here, so its cleanup runs."""
    if not task.cancelled() or inspect.getcoroutinestate(coro) != inspect.CORO_SUSPENDED:
        return
    try:
        coro.throw(asyncio.CancelledError())
    except BaseException:
        return
    coro.close()  # it waited again after the cancellation: end it there


async def _resumed(coro: Coroutine[Any, Any, Any], first: Any) -> Any:
    return await _rest(coro, first)


@types.coroutine
def _rest(coro: Coroutine[Any, Any, Any], first: Any) -> Generator[Any, Any, Any]:
    """The rest of ``coro``, which has already run to its first wait (``first``, the
    future it waits on): each value sent or exception thrown goes on to it."""
    waiting = first
    while True:
        try:
            sent = yield waiting
        except BaseException as exc:
            try:
                waiting = coro.throw(exc)
            except StopIteration as stop:
                return stop.value
        else:
            try:
                waiting = coro.send(sent)
            except StopIteration as stop:
                return stop.value
