"""A bulk enqueue's calls are validated in one pass and built from one template (issue 40,
item 5): the same messages and the same errors as the calls one by one, and every message
its own, which enqueue middleware may change in place."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, Field

from taskq import App, Middleware
from taskq.arguments import ArgsValidator
from taskq.errors import ArgumentsError
from taskq.ids import new_id, new_ids
from taskq.records.envelope import Envelope


def plain(i: int, name: str = "x", *, flag: bool = False) -> None: ...


def rich(when: datetime, ratio: float, count: Annotated[int, Field(gt=0)] = 1) -> None: ...


def bare() -> None: ...


class Order(BaseModel):
    id: int
    qty: float = 1.0


@dataclass
class Point:
    x: int
    y: int


def shaped(order: Order, at: Point, extra: Any = None) -> None: ...


BATCHES: list[tuple[Any, list[tuple[list[Any], dict[str, Any]]]]] = [
    (plain, [([i], {}) for i in range(5)]),
    (plain, [([i, "n"], {"flag": True}) for i in range(5)]),
    (plain, [([], {"i": i, "name": "q"}) for i in range(5)]),
    (plain, [(["7"], {}), ([8], {})]),  # coerced as one by one coerces
    (plain, [([1], {}), ([2, "b"], {}), ([], {"i": 3})]),  # shapes differ: call by call
    (rich, [(["2026-01-01T00:00:00Z", 1], {"count": 3}) for _ in range(3)]),
    (rich, [(["2026-01-01T00:00:00Z", float("nan")], {})]),  # refused later, by the encoder
    (bare, [([], {}), ([], {})]),
    (shaped, [([{"id": i}, {"x": 1, "y": 2}], {"extra": [i, {"z": 2}]}) for i in range(3)]),
]


@pytest.mark.parametrize(("fn", "calls"), BATCHES)
def test_a_batch_validates_to_what_each_call_would(fn: Any, calls: Any) -> None:
    one_by_one = ArgsValidator(fn, "t")
    expected = [one_by_one.for_wire(args, kwargs) for args, kwargs in calls]
    got = ArgsValidator(fn, "t").for_wire_many(calls)
    assert json.dumps(got) == json.dumps(expected)  # nan compares as text


BAD: list[tuple[Any, list[tuple[list[Any], dict[str, Any]]]]] = [
    (plain, [([1], {}), (["one"], {}), (["two"], {})]),  # the first bad value is named
    (plain, [([1, "a", 3], {})]),
    (plain, [([], {})]),
    (plain, [([1], {"nope": 1})]),
    (rich, [(["2026-01-01T00:00:00Z", 1.0], {"count": 2}), (["2026-01-01", 1.0], {"count": 0})]),
]


@pytest.mark.parametrize(("fn", "calls"), BAD)
def test_a_bad_call_in_a_batch_raises_what_it_raises_alone(fn: Any, calls: Any) -> None:
    alone = ArgsValidator(fn, "t")
    with pytest.raises(ArgumentsError) as first:
        for args, kwargs in calls:
            alone.for_wire(args, kwargs)
    with pytest.raises(ArgumentsError) as batched:
        ArgsValidator(fn, "t").for_wire_many(calls)
    assert str(batched.value) == str(first.value)


def test_a_batch_s_ids_are_ulids_of_one_millisecond_each_its_own() -> None:
    ids = new_ids(5000)
    assert len(set(ids)) == 5000
    assert all(len(i) == 26 and i[:10] == ids[0][:10] for i in ids)
    assert new_id() >= ids[0][:10]  # time-ordered as single ids are


class Stamper(Middleware):
    """Changes each envelope's own headers and meta in place, as middleware may."""

    async def enqueue(self, envelope: Envelope, call_next: Any) -> None:
        envelope.headers["X-Item"] = str(envelope.args[0])
        envelope.meta["item"] = envelope.args[0]
        await call_next(envelope)


async def test_each_message_of_a_batch_is_its_own(app: App) -> None:
    app.add_middleware(Stamper())

    @app.task
    async def shout(n: int) -> None: ...

    handles = await shout.options(meta={"batch": "b1"}, expires=3600).enqueue_many(range(3))
    single = await shout.options(meta={"batch": "b1"}, expires=3600).enqueue(9)
    broker = (await app.client()).connection
    stream = app.names.queue_stream("default")
    stored = [await broker.messages.get(stream, seq) for seq in (1, 2, 3, 4)]
    bodies = [json.loads(m.data) for m in stored if m is not None]
    assert [m.headers["X-Item"] for m in stored if m is not None] == ["0", "1", "2", "9"]
    assert [b["meta"] for b in bodies] == [{"batch": "b1", "item": n} for n in (0, 1, 2, 9)]
    assert [b["id"] for b in bodies] == [h.id for h in [*handles, single]]
    # the template's fields are the single call's: the same keys, the same expiry rule
    assert set(bodies[0]) == set(bodies[3]) and bodies[0]["expires_at"] is not None
    assert bodies[0]["enqueued_at"] == bodies[2]["enqueued_at"] <= bodies[3]["enqueued_at"]
