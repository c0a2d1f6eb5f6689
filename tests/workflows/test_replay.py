"""The replay engine alone (no server): a run's code driven against a journal the test
writes the way the decision and the steps would, round by round."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from taskq import App
from taskq.errors import TaskFailed
from taskq.workflows.journal import Event
from taskq.workflows.replay import NonDeterminism, Replayer, WorkflowCodeError
from taskq.workflows.workflow import Workflow

app = App()


@app.task
async def charge(order: str, cents: int) -> str:
    return f"r-{order}"


@app.task
async def pack(order: str, box: int) -> int:
    return box


Code = Callable[[Workflow], Coroutine[Any, Any, Any]]


class Journal:
    """A journal as the server would hold it, and decisions replayed from scratch."""

    def __init__(self, code: Code) -> None:
        self.code = code
        self.events: list[Event] = []
        self.runs = 0  # how many times the code was started (a replay each decision)

    def add(self, kind: str, n: int = -1, **details: Any) -> None:
        self.events.append(Event(kind, n, details, seq=len(self.events) + 1))

    def decide(self) -> Replayer:
        """One decision: replay from scratch, record its round like the real one does."""
        replayer = Replayer("run1")
        replayer.code = self.code(Workflow("run1", replayer))
        self.runs += 1
        replayer.feed(self.events)
        made = replayer.decide() if replayer.ended is None else []
        upto = self.events[-1].seq if self.events else 0
        self.add("decided", upto=upto, commands=made)
        return replayer


def test_a_completed_step_comes_from_the_journal_and_the_code_goes_on() -> None:
    async def order(wf: Workflow) -> dict[str, Any]:
        receipt = await wf.run(charge, "o-1", 1999)
        boxes = await wf.gather(*(wf.run(pack, "o-1", i) for i in range(3)))
        return {"receipt": receipt, "boxes": boxes}

    journal = Journal(order)
    first = journal.decide()
    assert [c.describe() for c in first.made] == ["run charge (step 0)"]
    journal.add("done", 0, ok=True, value="r-o-1")
    second = journal.decide()
    # Then the charge is not made again: its result came from the journal, the fan-out follows
    assert [c.describe() for c in second.made[1:]] == [f"run pack (step {n})" for n in (1, 2, 3)]
    assert second.made[0] is journal.events[0].details["commands"][0]
    for n, value in ((3, 2), (1, 0)):
        journal.add("done", n, ok=True, value=value)
    assert journal.decide().ended is None  # box 1 (step 2) still out
    journal.add("done", 2, ok=True, value=1)
    last = journal.decide()
    assert last.ended is not None and last.ended.value == {"receipt": "r-o-1", "boxes": [0, 1, 2]}


def test_a_failed_step_raises_task_failed_which_the_code_may_catch() -> None:
    async def saga(wf: Workflow) -> str:
        try:
            await wf.run(charge, "o-2", 5)
        except TaskFailed as exc:
            await wf.run(pack, "refund", 0)  # compensation
            return f"refunded after {exc.type}"
        return "charged"

    journal = Journal(saga)
    journal.decide()
    error = {"type": "CardDeclined", "message": "no", "traceback": ""}
    journal.add("done", 0, ok=False, state="dead", error=error, reason="exhausted")
    assert [c.describe() for c in journal.decide().made] == [
        "run charge (step 0)",
        "run pack (step 1)",
    ]
    journal.add("done", 1, ok=True, value=0)
    ended = journal.decide().ended
    assert ended is not None and ended.value == "refunded after CardDeclined"


def test_changed_code_fails_with_non_determinism_naming_the_step() -> None:
    version = {"code": "old"}

    async def flow(wf: Workflow) -> None:
        await wf.run(charge, "o", 1)
        await wf.run(charge if version["code"] == "old" else pack, "o", 2)

    journal = Journal(flow)
    journal.decide()
    journal.add("done", 0, ok=True, value="r")
    journal.decide()
    version["code"] = "new"
    journal.add("done", 1, ok=True, value="r")
    ended = journal.decide().ended
    assert ended is not None and isinstance(ended.error, NonDeterminism)
    assert ended.error.n == 1 and "run charge (step 1)" in str(ended.error)


def test_non_determinism_cannot_be_swallowed_by_the_code() -> None:
    flip = {"task": charge}

    async def stubborn(wf: Workflow) -> str:
        try:
            await wf.run(flip["task"], "o", 1)
        except Exception:
            return "swallowed"
        return "ok"

    journal = Journal(stubborn)
    journal.decide()
    flip["task"] = pack
    ended = journal.decide().ended
    assert ended is not None and isinstance(ended.error, NonDeterminism)


def test_patched_keeps_old_runs_on_their_path_and_takes_new_ones_down_the_new() -> None:
    patched = {"on": False}

    async def flow(wf: Workflow) -> list[str]:
        out = [await wf.run(charge, "o", 1)]
        if patched["on"] and wf.patched("gift-wrap"):
            out.append(await wf.run(pack, "o", 9))
        out.append(await wf.run(charge, "o", 2))
        return out

    old = Journal(flow)
    old.decide()
    old.add("done", 0, ok=True, value="a")
    old.decide()  # the old code made step 1: charge
    patched["on"] = True  # deployed while the old run waits for step 1
    old.add("done", 1, ok=True, value="b")
    ended = old.decide().ended
    assert ended is not None and ended.value == ["a", "b"]  # no gift wrap for it
    new = Journal(flow)
    new.decide()
    new.add("done", 0, ok=True, value="a")
    assert [c.describe() for c in new.decide().made][1:] == [
        "patch gift-wrap (step 1)",
        "run pack (step 2)",
    ]


def test_signals_are_kept_for_a_later_wait_and_a_timeout_gives_none() -> None:
    async def approval(wf: Workflow) -> list[Any]:
        first = await wf.wait_for("approved", timeout=60)
        second = await wf.wait_for("approved", timeout=60)
        return [first, second]

    journal = Journal(approval)
    journal.add("signal", name="approved", payload={"by": "ann"})  # before the run waits
    journal.decide()
    journal.decide()
    journal.add("fired", 1)  # the second wait's timer fires first
    journal.add("signal", name="approved", payload={"by": "late"})
    ended = journal.decide().ended
    assert ended is not None and ended.value == [{"by": "ann"}, None]


def test_now_uuid_and_random_are_the_same_on_every_replay() -> None:
    seen: list[tuple[Any, ...]] = []

    async def values(wf: Workflow) -> None:
        seen.append((wf.now(), wf.uuid(), wf.random()))
        await wf.sleep(1)

    journal = Journal(values)
    journal.decide()
    journal.add("fired", 3)
    journal.decide()
    assert len(seen) == 2 and seen[0] == seen[1]


def test_awaiting_anything_but_a_wf_call_fails_the_run_with_a_clear_error() -> None:
    import asyncio

    async def sleepy(wf: Workflow) -> None:
        await asyncio.sleep(0)

    ended = Journal(sleepy).decide().ended
    assert ended is not None and isinstance(ended.error, WorkflowCodeError)
    assert "asyncio" not in str(ended.error) and "wf.run" in str(ended.error)


def test_a_kept_replayer_fed_only_new_events_decides_as_a_fresh_replay_does() -> None:
    async def order(wf: Workflow) -> list[int]:
        return [await wf.run(pack, "o", i) for i in range(3)]

    journal = Journal(order)
    kept = journal.decide()
    for n in range(3):
        journal.add("done", n, ok=True, value=n)
        fresh_events = [e for e in journal.events if e.seq > kept.seen]
        kept.feed(fresh_events)
        made = kept.decide()
        replayed = journal.decide()  # appends the round from a fresh replay
        assert made == replayed.made[len(replayed.recorded) :] or kept.ended is not None
    assert kept.ended is not None and kept.ended.value == [0, 1, 2]
    assert journal.runs == 4


@pytest.mark.parametrize("delay", [-1, 10**9])
def test_a_timer_out_of_range_is_a_config_error(delay: float) -> None:
    from taskq.errors import ConfigError

    async def flow(wf: Workflow) -> None:
        await wf.sleep(delay)

    ended = Journal(flow).decide().ended
    assert ended is not None and isinstance(ended.error, ConfigError)


def test_a_fired_event_never_answers_a_step() -> None:
    async def order(wf: Workflow) -> str:
        return str(await wf.run(charge, "o", 1))

    journal = Journal(order)
    journal.decide()
    journal.add("fired", 0)  # forged: a timer's event for a step
    assert journal.decide().ended is None  # the step still waits for its own outcome
    journal.add("done", 0, ok=True, value="r")
    ended = journal.decide().ended
    assert ended is not None and ended.value == "r"
