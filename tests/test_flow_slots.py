"""Worker slots by priority level: higher levels first, lower ones aged in (never starved)."""

from __future__ import annotations

import asyncio

import pytest

from taskq.workers import slots as slots_module
from taskq.workers.slots import Slots
from tests.conftest import wait_until


async def test_a_freed_slot_goes_to_the_highest_level_waiting() -> None:
    slots = Slots(1)
    assert await slots.reserve(1) == 1  # busy
    order: list[int] = []

    async def waiter(level: int) -> None:
        taken = await slots.reserve(1, level=level)
        order.append(level)
        await asyncio.sleep(0.01)  # holds the slot a moment: the others stay waiting
        slots.release(taken)

    waiters = [asyncio.create_task(waiter(level)) for level in (1, 5, 9, 3)]
    # all four are waiting, lowest first in arrival (the queue of waiters, read directly)
    await wait_until(lambda: len(slots._waiting) == 4, timeout=5)
    slots.release(1)
    await asyncio.wait_for(asyncio.gather(*waiters), 5)
    assert order == [9, 5, 3, 1]


async def test_a_lower_level_is_never_starved_by_a_busy_higher_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(slots_module, "AGING", 0.05)  # a level per 50 ms of waiting
    slots = Slots(1)
    served: list[str] = []  # who got the slot, in order
    stop = asyncio.Event()

    async def busy_high() -> None:  # always back for the slot at once
        while not stop.is_set():
            taken = await slots.reserve(1, level=9)
            served.append("high")
            await asyncio.sleep(0.005)
            slots.release(taken)

    async def low() -> int:
        arrived = len(served)
        taken = await slots.reserve(1, level=0)
        served.append("low")
        slots.release(taken)
        return arrived

    highs = [asyncio.create_task(busy_high()) for _ in range(2)]
    await wait_until(lambda: len(served) >= 2, timeout=5)  # the high levels take turns
    try:
        # without aging it would wait forever: wait_for fails at 5 s, a hundred times the
        # ~9 x AGING of waiting it takes
        arrived = await asyncio.wait_for(low(), 5)
    finally:
        stop.set()
        slots.wake()
        await asyncio.gather(*highs, return_exceptions=True)
    # 9 levels behind, it waited while the busy level went on taking the slot: more turns
    # than the one first come, first served gives the high waiting ahead of it (aged in
    # after ~9 x AGING, that is dozens of turns; it was served above while they went on)
    overtaken = served.index("low") - arrived
    assert overtaken >= 2, served
