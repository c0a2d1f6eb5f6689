"""Where groups and chords keep their members' marks (taskq.workflows.marks): in the
workflows stream beside durable runs' journals, each written once and expiring with the
results; a canvas an earlier taskq enqueued ends in the FLOWS bucket where it began."""

from __future__ import annotations

import contextlib
import secrets
from dataclasses import replace

import pytest

from taskq import App, TaskFailed, chord, group
from taskq.errors import NotFound
from taskq.handle import TaskHandle
from taskq.ids import new_id
from taskq.task import CallOptions
from taskq.workflows.state import ChordState, GroupState, Step, chord_final
from tests.conftest import running_worker
from tests.workflows.test_canvas_runs import declare


async def test_new_canvases_keep_their_marks_in_the_workflows_stream(app: App) -> None:
    add, total, _ = declare(app)
    # Given a group and a chord enqueued by this taskq
    grouped = await group(*(add.s(i, i) for i in range(3))).enqueue()  # type: ignore[attr-defined]
    chorded = await chord(group(*(add.s(i, 1) for i in range(3))), total.s()).enqueue()  # type: ignore[attr-defined]
    # When a worker runs them
    async with running_worker(app, concurrency=4):
        assert await grouped.result(timeout=30) == [0, 2, 4]
        assert await chorded.result(timeout=30) == 6
    broker, names = (await app.client()).connection, app.names
    stream = names.workflows_stream
    chord_id = chorded.id.split(".")[0]
    # Then each member left one mark in the workflows stream, and each complete shard one
    assert await broker.messages.count(stream, names.canvas_filter(grouped.id, "g-0")) == 3
    assert await broker.messages.count(stream, names.canvas_filter(grouped.id, "g-d")) == 1
    marks = await broker.messages.lasts(stream, f"{app.settings.prefix}.wf.{chord_id}.k.*.*")
    assert marks is not None and len(marks) == 4
    # each expiring with the results, and none in a durable run's journal under that id
    ttl = f"{int(app.settings.results_ttl)}s"
    assert {m.headers.get("Nats-TTL") for m in marks} == {ttl}
    assert await broker.messages.count(stream, names.journal_filter(chord_id)) == 0
    # and no FLOWS bucket was made
    with pytest.raises(NotFound):
        await broker.streams.state(f"KV_{names.flows_bucket}")


async def test_a_canvas_an_earlier_taskq_enqueued_ends_where_it_began(app: App) -> None:
    add, _, _ = declare(app)
    client = await app.client()
    # Given a chord and a group whose members an earlier taskq enqueued (no `store`)
    chord_id, token = new_id(), secrets.token_hex(16)
    callback = Step(task="total", queue="default")
    members = ChordState(
        id=chord_id, size=3, final=chord_final(chord_id, token), callback=callback, token=token
    )
    group_id = new_id()
    for i in range(3):
        flow = members.model_copy(update={"index": i})
        await _send(add, f"{chord_id}.{i}", (i, 10), flow)
        await _send(add, f"{group_id}.{i}", (i, 0), GroupState(id=group_id, index=i, size=3))
    # When a worker of this taskq runs them
    async with running_worker(app, concurrency=4):
        done = TaskHandle(members.final, "total", "default", 0, False, app)
        assert await done.result(timeout=30) == 33
    # Then their marks are where that taskq kept them, and none in the workflows stream
    kv, bucket = client.connection.kv, app.names.flows_bucket
    assert await kv.count(bucket, f"{members.members}.r.*") == 3
    assert await kv.count(bucket, f"{group_id}.s.*") == 1
    for flow_id in (chord_id, group_id):
        marks = f"{app.settings.prefix}.wf.{flow_id}.k.>"
        with contextlib.suppress(NotFound):  # no workflows stream made at all
            state = await client.connection.streams.state(app.names.workflows_stream, marks)
            assert state.subjects == {}


async def _send(task: object, task_id: str, args: tuple[int, int], flow: object) -> None:
    envelope = task.build_envelope(list(args), {}, CallOptions(key=task_id))  # type: ignore[attr-defined]
    await task.send(replace(envelope, workflow=flow), task.queue)  # type: ignore[attr-defined]


async def test_a_chord_member_s_result_over_an_event_s_bound_fails_the_chord(app: App) -> None:
    """A chord member's result is kept as a durable step's is, up to 256 KiB: a larger
    one fails the member once (`permanent`, naming size and bound), and so the chord."""
    _, total, _ = declare(app)

    @app.task
    async def big(n: int) -> str:
        return "x" * n

    handle = await chord(group(big.s(10), big.s(300 * 1024)), total.s()).enqueue()  # type: ignore[attr-defined]
    async with running_worker(app):
        with pytest.raises(TaskFailed) as failed:
            await handle.result(timeout=30)
    assert failed.value.type == "PayloadTooLarge", failed.value
    assert "262,144" in failed.value.message or "262144" in failed.value.message
