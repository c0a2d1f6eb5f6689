"""Worker slots by priority level: higher levels first, lower ones aged in (never starved)."""

from __future__ import annotations

import asyncio

import pytest

from taskq.workers import slots as slots_module
from taskq.workers.slots import Slots


async def test_a_freed_slot_goes_to_the_highest_level_waiting() -> None:
    slots = Slots(1)
    assert await slots.reserve(1) == 1  # busy
    order: list[int] = []

    async def waiter(rank: int) -> None:
        taken = await slots.reserve(1, rank=rank)
        order.append(rank)
        await asyncio.sleep(0.01)
        slots.release(taken)

    waiters = [asyncio.create_task(waiter(rank)) for rank in (1, 5, 9, 3)]
    await asyncio.sleep(0.05)  # all four are waiting, lowest first in arrival
    slots.release(1)
    await asyncio.wait_for(asyncio.gather(*waiters), 5)
    assert order == [9, 5, 3, 1]


async def test_a_lower_level_is_never_starved_by_a_busy_higher_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(slots_module, "AGING", 0.05)  # a level per 50 ms of waiting
    slots = Slots(1)
    low_served = asyncio.Event()
    stop = asyncio.Event()

    async def busy_high() -> None:  # always back for the slot at once
        while not stop.is_set():
            taken = await slots.reserve(1, rank=9)
            await asyncio.sleep(0.005)
            slots.release(taken)

    async def low() -> None:
        taken = await slots.reserve(1, rank=0)
        low_served.set()
        slots.release(taken)

    highs = [asyncio.create_task(busy_high()) for _ in range(2)]
    await asyncio.sleep(0.02)
    try:
        await asyncio.wait_for(low(), 5)
    finally:
        stop.set()
        slots.wake()
        await asyncio.gather(*highs, return_exceptions=True)
    # 9 levels behind, it is served after about 9 x AGING of waiting: without aging it
    # would wait forever, and wait_for above fails at 5 s, ten times that
    assert low_served.is_set()
