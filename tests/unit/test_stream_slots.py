"""The synthetic server's stream slots: at most N holders, the rest served in arrival order,
and no slot lost to a waiter that was cancelled (a client that went away)."""

from __future__ import annotations

import asyncio

import pytest

from moeperf.targets.synthetic.slots import StreamSlots


async def _settle() -> None:
    # A few loop turns: woken tasks run, cancellations land.
    for _ in range(5):
        await asyncio.sleep(0)


def test_no_limit_never_waits():
    async def main() -> None:
        slots = StreamSlots(0)
        for _ in range(100):
            await asyncio.wait_for(slots.acquire(), 1)
        assert (slots.running, slots.waiting) == (100, 0)
        for _ in range(100):
            slots.release()
        assert slots.running == 0

    asyncio.run(main())


def test_waiters_get_slots_in_arrival_order_and_newcomers_queue_behind_them():
    async def main() -> None:
        slots = StreamSlots(2)
        order: list[str] = []

        async def request(name: str, hold: asyncio.Event) -> None:
            async with slots:
                order.append(name)
                await hold.wait()

        holds = {name: asyncio.Event() for name in "abcdef"}
        tasks = {}
        for name in "abcde":
            tasks[name] = asyncio.create_task(request(name, holds[name]))
            await _settle()
        assert order == ["a", "b"]
        assert (slots.running, slots.waiting) == (2, 3)
        holds["a"].set()
        await _settle()
        # The freed slot went to c, the first waiter; a newcomer now queues behind d, e.
        tasks["f"] = asyncio.create_task(request("f", holds["f"]))
        await _settle()
        assert order == ["a", "b", "c"]
        assert (slots.running, slots.waiting) == (2, 3)
        for name in "bcdef":
            holds[name].set()
        await asyncio.wait_for(asyncio.gather(*tasks.values()), 5)
        assert order == list("abcdef")
        assert (slots.running, slots.waiting) == (0, 0)

    asyncio.run(main())


def test_a_waiter_cancelled_in_the_queue_leaves_it_holding_nothing():
    async def main() -> None:
        slots = StreamSlots(1)
        await slots.acquire()
        first = asyncio.create_task(slots.acquire())
        second = asyncio.create_task(slots.acquire())
        await _settle()
        assert slots.waiting == 2
        first.cancel()
        await _settle()
        assert (slots.running, slots.waiting) == (1, 1)
        slots.release()
        await asyncio.wait_for(second, 1)  # the slot skipped the cancelled waiter
        assert (slots.running, slots.waiting) == (1, 0)
        slots.release()
        assert slots.running == 0

    asyncio.run(main())


def test_a_waiter_cancelled_right_after_being_handed_a_slot_passes_it_on():
    async def main() -> None:
        slots = StreamSlots(1)
        await slots.acquire()
        first = asyncio.create_task(slots.acquire())
        second = asyncio.create_task(slots.acquire())
        await _settle()
        # The slot is handed to first, which is cancelled before it runs again.
        slots.release()
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        await asyncio.wait_for(second, 1)
        assert (slots.running, slots.waiting) == (1, 0)
        slots.release()
        assert slots.running == 0

    asyncio.run(main())


def test_a_holder_cancelled_mid_block_frees_its_slot():
    async def main() -> None:
        slots = StreamSlots(1)

        async def hold_forever() -> None:
            async with slots:
                await asyncio.Event().wait()

        holder = asyncio.create_task(hold_forever())
        await _settle()
        waiter = asyncio.create_task(slots.acquire())
        await _settle()
        assert (slots.running, slots.waiting) == (1, 1)
        holder.cancel()
        await asyncio.wait_for(waiter, 1)
        assert (slots.running, slots.waiting) == (1, 0)

    asyncio.run(main())


def test_a_negative_limit_is_refused():
    with pytest.raises(ValueError, match=">= 0"):
        StreamSlots(-1)
