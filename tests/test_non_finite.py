"""nan, inf and -inf, which JSON has no form for: refused where a value is encoded to be
sent (at the call, with the task and where the float is), never sent as null (None to the
task) or as `NaN` (not JSON). A task returning one fails, permanently."""

from __future__ import annotations

import json
import math
from typing import Any

import nats
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_core import from_json

from taskq import App, ArgumentsError, TaskFailed, chain, chord, group
from taskq.errors import DecodeError, NotFound
from taskq.records.envelope import Envelope, decode
from taskq.records.results import fetch
from tests.conftest import running_worker, wait_until
from tests.examples import examples

NAN, INF = float("nan"), float("inf")
NON_FINITE = (NAN, INF, -INF)


async def stored(app: App, queue: str = "default") -> int:
    """How many messages the queue's stream holds (0: no stream yet)."""
    client = await app.client()
    try:
        return (await client.connection.streams.state(app.names.queue_stream(queue))).messages
    except NotFound:
        return 0


async def test_enqueue_refuses_a_non_finite_argument_naming_task_and_place(app: App) -> None:
    @app.task
    async def measure(x: float, opts: dict[str, Any] | None = None, extra: Any = None) -> None: ...

    for value in NON_FINITE:
        with pytest.raises(ArgumentsError, match=r"'measure'.*args\[0\] is (nan|inf|-inf)"):
            await measure.enqueue(value)
        with pytest.raises(ArgumentsError) as info:
            await measure.enqueue(1.0, opts={"xs": [1, 2, value]})
        assert "kwargs['opts']['xs'][2]" in str(info.value)
        from taskq import NonFiniteFloat

        assert isinstance(info.value.__cause__, NonFiniteFloat)
        assert info.value.__cause__.path == ("opts", "xs", 2)
        with pytest.raises(ArgumentsError, match=r"args\[2\]\['deep'\]\[0\]"):
            await measure.enqueue(1.0, None, {"deep": [value]})  # `Any`: was sent as None
        with pytest.raises(ArgumentsError, match=r"meta\['score'\]"):
            await measure.options(meta={"score": value}).enqueue(1.0)
        with pytest.raises(ArgumentsError, match=r"args\[0\]"):
            await measure.options(key="once", unique_for=60).enqueue(value)
    assert await stored(app) == 0  # nothing published
    # a string with those letters in it is a string: sent as it is
    handle = await measure.enqueue(1.0, extra=["NaN", "-Infinity", {"NaN": 1e308}])
    # refused before its gate stored anything: this call is the key's first
    unique = await measure.options(key="once", unique_for=60).enqueue(2.0)
    assert not unique.duplicate and await stored(app) == 2
    async with running_worker(app) as worker:
        await handle.result(timeout=15)
        await wait_until(lambda: worker.stats["succeeded"] == 2)


async def test_enqueue_many_with_one_non_finite_item_publishes_nothing(app: App) -> None:
    @app.task
    async def point(x: Any, y: float = 0.0) -> None: ...

    with pytest.raises(ArgumentsError, match=r"'point'.*args\[0\]\[1\] is nan"):
        await point.enqueue_many([[1.0], [[1, NAN]], [2.0]])
    with pytest.raises(ArgumentsError, match=r"kwargs\['y'\] is -inf"):
        await point.enqueue_many([{"x": i, "y": -INF if i == 700 else 0.5} for i in range(1500)])
    assert await stored(app) == 0
    assert len(await point.enqueue_many([[1.0], [2.5]])) == 2
    assert await stored(app) == 2


async def test_a_workflow_step_with_a_non_finite_argument_is_refused_at_enqueue(
    app: App,
) -> None:
    @app.task
    async def add(a: float, b: float = 0.0) -> float:
        return a + b

    @app.task
    async def total(values: list[float], bonus: Any = None) -> float:
        return sum(values)

    # a chain's later steps, not validated at enqueue, travel in its first message
    with pytest.raises(ArgumentsError, match=r"'total'.*kwargs\['bonus'\]\[0\] is inf"):
        await chain(add.s(1.0), add.s(2.0), total.s(bonus=[INF])).enqueue()
    with pytest.raises(ArgumentsError, match=r"'add'.*args\[0\] is nan"):
        await chain(add.s(NAN), total.s()).enqueue()
    with pytest.raises(ArgumentsError, match=r"'total'.*args\[0\] is -inf"):
        await chord(group(add.s(1.0), add.s(2.0)), total.s(-INF)).enqueue()
    assert await stored(app) == 0
    async with running_worker(app):
        handle = await chain(add.s(1.0, 0.5), add.s(2.0)).enqueue()
        assert await handle.result(timeout=15) == 3.5


async def test_a_task_returning_a_non_finite_float_fails_for_good(app: App) -> None:
    """Refused like such an argument: the task is dead (`permanent`, no retry, a dead
    letter), its record names where the float is, and nothing stores it as null."""

    @app.task(max_retries=3)
    async def stats(n: int) -> Any:
        return [{"mean": NAN}, INF, -INF, {"mean": [1.0, INF]}][n]

    @app.task(store_result=False)
    async def unrecorded() -> float:
        return NAN  # goes nowhere: nothing to refuse

    async with running_worker(app) as worker:
        handles = [await stats.enqueue(n) for n in range(4)]
        await unrecorded.enqueue()
        for handle, where in zip(
            handles,
            ["result['mean'] is nan", "result is inf", "result is -inf", "[1] is inf"],
            strict=True,
        ):
            with pytest.raises(TaskFailed) as info:
                await handle.result(timeout=15)
            assert info.value.type == "NonFiniteFloat" and where in info.value.message
            assert info.value.reason == "permanent"
            record = await fetch(app, handle.id)
            assert record is not None and record.state == "dead" and record.result is None
            assert record.attempts == 1  # not retried
        await wait_until(lambda: worker.stats["succeeded"] == 1)
        await wait_until(lambda: worker.stats["dead:permanent"] == 4)


async def test_a_chain_step_returning_nan_ends_the_chain(app: App) -> None:
    @app.task
    async def half(x: float) -> float:
        return x / 2 if x else NAN

    async with running_worker(app):
        handle = await chain(half.s(0.0), half.s()).enqueue()
        with pytest.raises(TaskFailed, match=r"result is nan"):
            await handle.result(timeout=15)


async def test_a_foreign_body_with_nan_is_undecodable(app: App, nats_url: str, prefix: str) -> None:
    """`NaN` is not JSON (Python's json.dumps writes it): the message is dead-lettered as
    undecodable, never run with nan, nor stored again with null in its place."""
    ran: list[Any] = []

    @app.task
    async def take(x: Any) -> None:
        ran.append(x)

    async with running_worker(app) as worker:
        nc = await nats.connect(nats_url)
        js = nc.jetstream()
        body = json.dumps({"args": [[1, NAN]]}).encode()
        await js.publish(f"{prefix}.q.default.take", body)
        await nc.close()
        await wait_until(lambda: worker.stats["dead:undecodable"] == 1)
    assert ran == []


def test_decode_names_where_the_non_finite_number_is() -> None:
    with pytest.raises(DecodeError, match=r"body\['kwargs'\]\['x'\]\[1\] is -inf"):
        decode(b'{"kwargs": {"x": [1, -Infinity]}}', subject_task="t", msg_id=None, seq=1)
    assert decode(b'{"args": ["NaN"]}', subject_task="t", msg_id=None, seq=1).args == ["NaN"]
    deep = b'{"args": ' + b"[" * 600 + b"NaN" + b"]" * 600 + b"}"  # deeper than it writes
    with pytest.raises(DecodeError, match="cannot carry"):
        decode(deep, subject_task="t", msg_id=None, seq=1)


def test_a_periodic_task_with_a_non_finite_argument_fails_at_declaration(app: App) -> None:
    with pytest.raises(ArgumentsError, match=r"'tick'.*kwargs\['rate'\] is nan"):

        @app.periodic(every=60, kwargs={"rate": NAN}, name="tick")
        async def tick(rate: float) -> None: ...


# -- the encoder, for any JSON-like value ------------------------------------------------------
leaves = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()  # nan, inf and -inf included
    | st.sampled_from(NON_FINITE)  # more often
    | st.text()
    | st.sampled_from(["NaN", "Infinity", "-Infinity", '{"a":NaN}'])
)
values = st.recursive(
    leaves,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=25,
)


def non_finite_paths(value: Any, path: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    """Every path to a non-finite float in `value`."""
    if isinstance(value, float):
        return [] if math.isfinite(value) else [path]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in non_finite_paths(v, (*path, k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in non_finite_paths(v, (*path, i))]
    return []


def same(a: Any, b: Any) -> bool:
    """Equal with the same types all the way down (1, 1.0 and True are three values)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(v, b[k]) for k, v in a.items())
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    return bool(a == b)


@settings(max_examples=examples(400), deadline=None)
@given(values)
def test_encoding_refuses_exactly_the_non_finite_and_round_trips_the_rest(value: Any) -> None:
    from taskq import NonFiniteFloat
    from taskq.records.finite import finite_json

    paths = non_finite_paths(value)
    try:
        body = finite_json(value, what="v")
    except NonFiniteFloat as exc:
        assert paths and exc.path == paths[0]  # the first one, in document order
        assert exc.where.startswith("v[") or exc.where == "v"
        assert not math.isfinite(exc.value)
    else:
        assert not paths and same(from_json(body), value)
        json.loads(body, parse_constant=lambda c: pytest.fail(f"{c} written: not JSON"))


@settings(max_examples=examples(400), deadline=None)
@given(values)
def test_a_message_body_refuses_exactly_the_non_finite_and_round_trips_the_rest(
    value: Any,
) -> None:
    paths = non_finite_paths(value)
    envelope = Envelope(id="x", task="t", args=[value], kwargs={"k": value})
    try:
        data = envelope.encode()
    except ArgumentsError as exc:
        where = "args[0]" + "".join(f"[{step!r}]" for step in paths[0]) if paths else "?"
        assert paths and exc.task == "t" and f"{where} is " in str(exc)
    else:
        assert not paths
        back = decode(data, subject_task="t", msg_id=None, seq=1)
        assert same(back.args, [value]) and same(back.kwargs, {"k": value})
