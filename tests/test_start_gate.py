"""The start gate (taskq.flowcontrol.start_gate), the last check before a rate-limited body
starts: a reserved start that slipped is re-admitted and waited for, or the task is held
with the fresh reservation's ticket; one on time goes at once. (The load test,
tests/test_rates_under_load.py, measures the whole path on a real server; this pins the
gate's own decisions, which the reserved slack alone hides on a lightly loaded machine.)"""

from __future__ import annotations

import asyncio
import time

import pytest

from taskq.flowcontrol.rates import Verdict
from taskq.flowcontrol.start_gate import StartGate, StartSlipped


def _gate(start: float, fresh: list[Verdict]) -> tuple[StartGate, list[float]]:
    asked: list[float] = []

    async def readmit() -> Verdict:
        asked.append(time.time())
        return fresh.pop(0)

    return StartGate(start, 0.1, readmit, asyncio.get_running_loop(), "-"), asked


async def test_a_start_on_time_goes_at_once() -> None:
    gate, asked = _gate(time.time(), [])
    await gate.passed()
    assert asked == [] and gate.slipped == 0


async def test_a_slipped_start_waits_for_a_fresh_one() -> None:
    soon = time.time() + 0.2
    gate, asked = _gate(time.time() - 1.0, [Verdict(soon)])
    await gate.passed()
    assert len(asked) == 1 and gate.slipped == 1
    assert time.time() >= soon  # never before the fresh start


async def test_a_slipped_start_with_no_start_soon_is_held_with_its_ticket() -> None:
    gate, _ = _gate(time.time() - 1.0, [Verdict(None, time.time() + 30, "123:abcd")])
    with pytest.raises(StartSlipped) as slipped:
        await gate.passed()
    assert slipped.value.ticket == "123:abcd"


async def test_the_gate_in_a_def_task_s_thread_re_admits_on_the_loop() -> None:
    soon = time.time() + 0.1
    gate, asked = _gate(time.time() - 1.0, [Verdict(soon)])
    await asyncio.to_thread(gate.passed_in_thread)
    assert len(asked) == 1 and time.time() >= soon
