"""Worker slots: more fetch loops than slots take turns, none starves."""

from __future__ import annotations

import asyncio
from collections import Counter

from taskq.workers.slots import Slots


async def test_more_fetch_loops_than_slots_all_get_turns() -> None:
    slots = Slots(2)
    turns: Counter[str] = Counter()
    enough = asyncio.Event()

    async def loop(name: str) -> None:
        while not enough.is_set():
            taken = await slots.reserve(1)
            turns[name] += 1
            if min(turns["a"], turns["b"], turns["c"]) >= 20:
                enough.set()
            await asyncio.sleep(0.001)  # a fetch that comes back empty
            slots.release(taken)  # ...and straight back to reserve, like Worker._consume

    loops = [asyncio.create_task(loop(n)) for n in "abc"]
    try:
        await asyncio.wait_for(enough.wait(), 10)  # a starved loop never gets its 20
    finally:
        enough.set()
        slots.wake()
        for task in loops:
            task.cancel()
    assert max(turns.values()) - min(turns.values()) <= 3, turns


async def test_a_reserve_takes_what_is_free_up_to_most() -> None:
    slots = Slots(8)
    assert await slots.reserve(3) == 3
    assert await slots.reserve(100) == 5
    assert slots.free == 0
    slots.release(8)
    assert slots.free == 8
