"""Bad input published raw to queue subjects: the worker never crashes or stalls, and each
message lands in the DLQ with the right reason. Producer-side limits fail before publishing."""

from __future__ import annotations

import json
import os

import nats
import pytest

from taskq import App, PayloadTooLarge
from taskq.dlq.browse import list_dead
from taskq.dlq.record import BlobOriginal, RawOriginal
from tests.conftest import running_worker, wait_until

CASES: list[tuple[str, bytes, dict[str, str] | None, str]] = [
    ("add", os.urandom(64), None, "undecodable"),
    ("add", b"\xc3\x28 not utf-8", None, "undecodable"),
    ("add", b"{'args': [1, 2]}", None, "undecodable"),  # not JSON
    ("add", b"[1, 2]", None, "undecodable"),  # JSON, wrong shape
    ("add", b'{"args": 5}', None, "undecodable"),
    ("add", b'{"args": ["a", "b"]}', None, "permanent"),  # wrong argument types
    ("add", b'{"args": [1]}', None, "permanent"),  # missing argument
    ("nope", b'{"args": []}', None, "unknown_task"),
    ("add", b'{"args": ' + b"[" * 50_000 + b"]" * 50_000 + b"}", None, "undecodable"),
    ("add", b'{"args": [1, 2], "v": 99}', None, "undecodable"),
    ("add", b'{"args": [1, 2]}', {"Nats-Msg-Id": "\x00\x01garbage", "X-Junk": "\u2603" * 50}, "ok"),
    ("add", b"", None, "undecodable"),
]


async def test_garbage_goes_to_dlq_with_reasons(app: App, nats_url: str, prefix: str) -> None:
    app.configure(unknown_task_grace=0)  # an unknown task dead at once (no rolling deploy)

    @app.task
    async def add(a: int, b: int) -> int:
        return a + b

    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    async with running_worker(app) as worker:
        for task, body, headers, _ in CASES:
            await js.publish(f"{prefix}.q.default.{task}", body, headers=headers)
        expected_dead = sum(1 for c in CASES if c[3] != "ok")
        await wait_until(lambda: worker.stats["dead"] == expected_dead, timeout=30)
        await add.enqueue(1, 2)  # still serving after all of that
        await wait_until(lambda: worker.stats["succeeded"] == 2, timeout=10)
    await nc.close()
    records = await list_dead(app)
    assert sorted(r.reason for r in records) == sorted(c[3] for c in CASES if c[3] != "ok")
    raw = [r for r in records if r.reason == "undecodable"]
    assert all(isinstance(r.message, RawOriginal | BlobOriginal) for r in raw)
    assert all(r.error.message for r in records)


async def test_payload_at_max_payload_is_handled(app: App, nats_url: str, prefix: str) -> None:
    """A message as big as the server allows: runs if valid; if not, its dead letter (which
    cannot fit in one message) keeps the whole original by reference."""

    @app.task
    async def echo(text: str) -> int:
        return len(text)

    broker = (await app.client()).connection
    limit = broker.max_payload
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    filler = "x" * (limit - 200)
    good = json.dumps({"args": [filler]}).encode()
    bad = json.dumps({"args": [filler, 1]}).encode()  # too many arguments: permanent
    junk = os.urandom(limit - 100)
    async with running_worker(app) as worker:
        await js.publish(f"{prefix}.q.default.echo", good)
        await js.publish(f"{prefix}.q.default.echo", bad)
        await js.publish(f"{prefix}.q.default.echo", junk)
        await wait_until(
            lambda: worker.stats["succeeded"] == 1 and worker.stats["dead"] == 2, timeout=30
        )
    await nc.close()
    from taskq.dlq.oversize import original_bytes

    records = {r.reason: r for r in await list_dead(app)}
    assert set(records) == {"permanent", "undecodable"}
    assert await original_bytes(app, records["undecodable"]) == junk
    assert await original_bytes(app, records["permanent"]) == bad
    queue = await broker.streams.state(app.names.queue_stream("default"))
    assert queue.messages == 0


async def test_enqueue_over_the_payload_limit_fails_before_publishing(
    nats_url: str, prefix: str
) -> None:
    """Over the server's max_payload a body is claim-checked (tests/test_large_payloads.py);
    over `payload_limit` it is refused before anything is stored."""
    app = App(url=nats_url, prefix=prefix, payload_limit=3 * 2**20)

    @app.task
    async def store(blob: str) -> None: ...

    broker = (await app.client()).connection
    try:
        with pytest.raises(PayloadTooLarge) as info:
            await store.enqueue("y" * (3 * 2**20 + 1))
        assert info.value.limit == 3 * 2**20 and info.value.size > info.value.limit
        state = await broker.streams.state(app.names.queue_stream("default"))
        assert state.messages == 0
        blobs = await broker.streams.listing()
        assert not [name for name in blobs if name.startswith("OBJ_") and prefix.upper() in name]
    finally:
        await app.aclose()
