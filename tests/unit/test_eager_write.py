"""The load worker's eager body write (suites/serving/load/eager_write.py): aiohttp's body
writer is still the coroutine it names, a request's bytes leave in the loop pass that
sends it (a loop blocked right after finds them already at the server), and a writer
that has to wait, or is cancelled, runs on as an ordinary task would."""

from __future__ import annotations

import asyncio
import socket
import sys
import threading
import time

import aiohttp
import aiohttp.client_reqrep
import pytest

from moeperf.suites.serving.load import eager_write

BLOCK_S = 0.3  # the loop held after the send: 100x a loopback request's delivery


def test_it_names_aiohttps_body_writer():
    assert aiohttp.client_reqrep.ClientRequest.write_bytes.__qualname__ == eager_write.BODY_WRITER


class _Server:
    """One kept-alive connection, two requests each read whole (the first opens the
    connection, as a load worker's pool has it open), the second's arrival time kept."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.arrived_s: float | None = None
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.sock.accept()
        with conn:
            data = b""
            for _ in range(2):
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                head, data = data.split(b"\r\n\r\n", 1)
                length = int(next(
                    line.split(b":")[1] for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                ))  # fmt: skip
                while len(data) < length:
                    data += conn.recv(65536)
                data = data[length:]
                self.arrived_s = time.monotonic()
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
        self.sock.close()


def _send_then_block(eager: bool) -> tuple[float, float]:
    """A POST started, and the loop blocked by the callback queued right behind it: when
    the request arrived, and when the block began."""
    server = _Server()
    blocked_at: list[float] = []

    async def main() -> None:
        if eager:
            assert eager_write.install(asyncio.get_running_loop())
        async with aiohttp.ClientSession() as session:

            async def post() -> None:
                async with session.post(f"http://127.0.0.1:{server.port}/", json={"a": 1}) as r:
                    await r.read()

            await post()  # the connection, opened and kept

            def block() -> None:
                blocked_at.append(time.monotonic())
                time.sleep(BLOCK_S)

            task = asyncio.create_task(post())
            asyncio.get_running_loop().call_soon(block)
            await task

    asyncio.run(main())
    server.thread.join(5)
    assert server.arrived_s is not None
    return server.arrived_s, blocked_at[0]


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="aiohttp starts its writer eagerly")
def test_the_request_leaves_in_its_own_loop_pass():
    arrived_s, blocked_s = _send_then_block(eager=True)
    assert arrived_s < blocked_s + BLOCK_S / 3
    # Without it, on 3.11, the body waits out the block: what the test tells apart.
    arrived_s, blocked_s = _send_then_block(eager=False)
    assert arrived_s >= blocked_s + BLOCK_S * 0.9


def _as_body_writer(fn):
    fn.__qualname__ = eager_write.BODY_WRITER
    return fn


def test_a_writer_that_waits_or_is_cancelled_goes_on_as_a_task():
    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_task_factory(None)
        eager_write.install(loop) or loop.set_task_factory(eager_write._task_factory)
        steps: list[str] = []
        gate: asyncio.Future[int] = loop.create_future()

        @_as_body_writer
        async def waits() -> int:
            steps.append("first step")  # eager: before create_task returns
            value = await gate
            steps.append("resumed")
            return value + 1

        task = asyncio.create_task(waits())
        assert steps == ["first step"] and not task.done()
        gate.set_result(41)
        assert await task == 42 and steps == ["first step", "resumed"]

        @_as_body_writer
        async def at_once() -> str:
            return "written"

        done = asyncio.create_task(at_once())
        assert done.done() and done.result() == "written"

        cleaned: list[bool] = []

        @_as_body_writer
        async def cancelled() -> None:
            try:
                await loop.create_future()
            finally:
                cleaned.append(True)

        stuck = asyncio.create_task(cancelled())
        stuck.cancel()
        with pytest.raises(asyncio.CancelledError):
            await stuck
        assert cleaned == [True]

        async def ordinary() -> str:
            return "task"

        plain = asyncio.create_task(ordinary())
        assert isinstance(plain, asyncio.Task) and not plain.done()
        assert await plain == "task"

    asyncio.run(main())
