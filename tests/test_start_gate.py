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


def _gate(start: float, fresh: list[Verdict]) -> tuple[StartGate, list[str]]:
    """A gate whose reservation is `1:first`, and the tickets it gives back, one per
    fresh start it asks for (taken from `fresh` in turn)."""
    given_back: list[str] = []

    async def readmit(slipped: str) -> Verdict:
        given_back.append(slipped)
        return fresh.pop(0)

    loop = asyncio.get_running_loop()
    return StartGate(start, 0.1, readmit, loop, "-", ticket="1:first"), given_back


async def test_a_start_on_time_goes_at_once() -> None:
    gate, asked = _gate(time.time(), [])
    await gate.passed()
    assert asked == [] and gate.slipped == 0


async def test_a_slipped_start_waits_for_a_fresh_one() -> None:
    soon = time.time() + 0.2
    gate, asked = _gate(time.time() - 1.0, [Verdict(soon)])
    await gate.passed()
    assert asked == ["1:first"] and gate.slipped == 1  # the slipped start given back
    assert time.time() >= soon  # never before the fresh start


async def test_each_slipped_start_is_given_back_when_the_next_is_asked_for() -> None:
    soon = time.time() + 0.1
    late = Verdict(time.time() - 1.0, ticket="2:second")  # the fresh start slipped too
    gate, asked = _gate(time.time() - 1.0, [late, Verdict(soon, ticket="3:third")])
    await gate.passed()
    assert asked == ["1:first", "2:second"] and gate.ticket == "3:third"


async def test_a_slipped_start_with_no_start_soon_is_held_with_its_ticket() -> None:
    gate, _ = _gate(time.time() - 1.0, [Verdict(None, time.time() + 30, "123:abcd")])
    with pytest.raises(StartSlipped) as slipped:
        await gate.passed()
    assert slipped.value.ticket == "123:abcd"


async def test_the_gate_in_a_def_task_s_thread_re_admits_on_the_loop() -> None:
    soon = time.time() + 0.1
    gate, asked = _gate(time.time() - 1.0, [Verdict(soon)])
    await asyncio.to_thread(gate.passed_in_thread)
    assert asked == ["1:first"] and time.time() >= soon
