"""Claim-check references are bound to their message (docs/wire-format.md, "Large bodies"):
a reference is honoured only for the app's own bucket of that kind of body and an object
written for that message (its name holds a digest of the message's id); anything else is
dead-lettered as `undecodable`, never run, and deletes nothing."""

from __future__ import annotations

import json

import nats
import pytest

from taskq import App
from taskq.dlq.browse import list_dead
from taskq.ids import safe_id
from taskq.records.claims import CLAIM, Claim
from tests.conftest import running_worker, wait_until

TWO_MB = 2 * 2**20


async def _raw_value(nats_url: str, bucket: str, key: str) -> bytes:
    """A KV value's bytes as stored (a claim-check reference for a large value)."""
    nc = await nats.connect(nats_url)
    try:
        entry = await (await nc.jetstream().key_value(bucket)).get(key)
        return bytes(entry.value or b"")
    finally:
        await nc.close()


async def _publish(nats_url: str, subject: str, body: bytes, msg_id: str) -> None:
    nc = await nats.connect(nats_url)
    try:
        await nc.jetstream().publish(subject, body, headers={"Nats-Msg-Id": msg_id})
    finally:
        await nc.close()


async def test_a_reference_to_another_task_s_result_object_is_refused(
    app: App, nats_url: str, prefix: str
) -> None:
    """The reported exploit: 82 bytes naming the victim's result object made a worker run
    the victim's task (its record parsed as arguments) and delete the object."""
    runs: list[int] = []

    @app.task
    def big(n: int) -> str:
        runs.append(n)
        return "r" * TWO_MB

    async with running_worker(app) as worker:
        victim = await big.enqueue(7)
        assert len(await victim.result(timeout=30)) == TWO_MB
        stored = await _raw_value(nats_url, app.names.results_bucket, safe_id(victim.id))
        assert stored.startswith(CLAIM)  # the result went through the object store
        claim = Claim.parse(stored)
        forged = (
            CLAIM + json.dumps({"bucket": claim.bucket, "name": claim.name, "size": 1}).encode()
        )
        await _publish(nats_url, f"{prefix}.q.default.big", forged, "attacker-1")
        await wait_until(lambda: worker.stats["dead"] == 1, timeout=20)
    assert runs == [7]  # the victim's task did not run again
    [record] = await list_dead(app)
    assert record.reason == "undecodable" and "claim" in record.error.message
    assert len(await victim.result(timeout=5)) == TWO_MB  # its object is still there


async def test_a_reference_to_another_waiting_task_s_body_is_refused(
    app: App, nats_url: str, prefix: str
) -> None:
    """The right bucket and kind, but an object written for another message: refused, and
    the victim's body is still there when the victim runs."""
    runs: list[int] = []

    @app.task
    def size(blob: str, n: int) -> int:
        runs.append(n)
        return len(blob)

    victim = await size.options(queue="later").enqueue("v" * TWO_MB, 1)
    nc = await nats.connect(nats_url)
    try:
        stream = app.names.queue_stream("later")
        waiting = await nc.jetstream().get_last_msg(stream, f"{prefix}.q.>")
        reference = bytes(waiting.data or b"")
    finally:
        await nc.close()
    assert reference.startswith(CLAIM)
    elsewhere = CLAIM + json.dumps({"bucket": "OTHER_BLOBS", "name": "claim.x", "size": 1}).encode()
    async with running_worker(app, queues=["default"]) as worker:
        await _publish(nats_url, f"{prefix}.q.default.size", reference, "attacker-2")
        await _publish(nats_url, f"{prefix}.q.default.size", elsewhere, "attacker-3")
        await wait_until(lambda: worker.stats["dead"] == 2, timeout=20)
    assert runs == []
    records = await list_dead(app)
    assert [r.reason for r in records] == ["undecodable", "undecodable"]
    async with running_worker(app, queues=["later"]):
        assert await victim.result(timeout=30) == TWO_MB
    assert runs == [1]


@pytest.mark.parametrize(
    "reference",
    [
        b'{"bucket": 5}',
        b'{"bucket": "X", "name": "n", "size": "big"}',
        b"[" * 5000 + b"]" * 5000,
        b'{"bucket": "X", "name": ["n"], "size": 1}',
    ],
)
def test_unreadable_references_are_decode_errors(reference: bytes) -> None:
    from taskq.errors import DecodeError

    with pytest.raises(DecodeError):
        Claim.parse(CLAIM + reference)


async def test_large_bodies_through_schedules_and_parking_still_run(
    nats_url: str, prefix: str
) -> None:
    """References stay their owner's along the legitimate paths: a delayed task's object is
    its schedule's (its firing carries the server's `Nats-Scheduler`), and a parked task is
    woken with its body; every object is gone once its task settled."""
    from asyncio import Event

    from taskq.records.sealing import new_key
    from tests.stored import chunks

    app = App(url=nats_url, prefix=prefix, encryption_key=new_key())
    release = Event()

    @app.task
    def later(blob: str) -> int:
        return len(blob)

    @app.task(concurrency_key="tenant", max_per_key=1)
    async def parked(tenant: str, blob: str) -> int:
        await release.wait()
        return len(blob)

    try:
        delayed = await later.options(countdown=1).enqueue("d" * TWO_MB)
        async with running_worker(app) as worker:
            first = await parked.enqueue("acme", "p" * TWO_MB)
            second = await parked.enqueue("acme", "q" * TWO_MB)
            assert await delayed.result(timeout=30) == TWO_MB
            await wait_until(lambda: worker.stats["held"] >= 1, timeout=20)
            release.set()
            assert await first.result(timeout=30) == TWO_MB
            assert await second.result(timeout=30) == TWO_MB
            assert worker.stats["dead"] == 0

            async def no_objects() -> bool:
                return await chunks(app, app.names.blobs_bucket) == 0

            await wait_until(no_objects, timeout=30)
    finally:
        await app.aclose()


async def test_a_duplicate_large_publish_leaves_no_object_behind(
    nats_url: str, prefix: str
) -> None:
    """A claim-checked publish the server takes for a duplicate (a retried move, a repeated
    enqueue under one message id) stores nothing new: the object made for it goes too."""
    from tests.stored import chunks

    app = App(url=nats_url, prefix=prefix)

    @app.task
    def big(blob: str) -> int:
        return len(blob)

    try:
        first = await big.options(key="same-big").enqueue("x" * TWO_MB)
        once = await chunks(app, app.names.blobs_bucket)
        again = await big.options(key="same-big").enqueue("x" * TWO_MB)
        assert again.duplicate and not first.duplicate

        async def only_the_first() -> bool:
            return await chunks(app, app.names.blobs_bucket) == once

        await wait_until(only_the_first, timeout=30)
    finally:
        await app.aclose()
