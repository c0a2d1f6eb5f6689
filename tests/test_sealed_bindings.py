"""Sealed bodies are bound to what they are and where they are stored (AES-GCM additional
data, docs/wire-format.md "Encrypted bodies"): a body copied to another key or replayed
elsewhere opens as `undecodable`; every malformed sealed body is a DecodeError, dead-lettered
with a reason while the queue goes on."""

from __future__ import annotations

import os

import nats
import pytest

from taskq import App
from taskq.dlq.browse import list_dead
from taskq.errors import DecodeError
from taskq.ids import safe_id
from taskq.records.results import fetch
from taskq.records.sealing import LEGACY_MAGIC, MAGIC, Sealer, key_id, new_key, parse_key
from tests.conftest import running_worker, wait_until
from tests.stored import MARKER


async def test_a_result_copied_under_another_key_is_undecodable(keyed: App, nats_url: str) -> None:
    @keyed.task
    async def echo(text: str) -> str:
        return text

    async with running_worker(keyed):
        first = await echo.enqueue(MARKER)
        second = await echo.enqueue("other")
        assert await first.result(timeout=10) == MARKER
        assert await second.result(timeout=10) == "other"
    nc = await nats.connect(nats_url)
    try:
        kv = await nc.jetstream().key_value(keyed.names.results_bucket)
        entry = await kv.get(safe_id(first.id))
        await kv.put(safe_id(second.id), bytes(entry.value or b""))  # the copy
    finally:
        await nc.close()
    with pytest.raises(DecodeError):
        await fetch(keyed, second.id)
    assert (await fetch(keyed, first.id)) is not None  # the original still reads


async def test_a_delayed_task_s_body_replayed_on_the_queue_never_runs(
    keyed: App, nats_url: str, prefix: str
) -> None:
    ran: list[str] = []

    @keyed.task
    async def later(text: str) -> None:
        ran.append(text)

    handle = await later.options(countdown=3600).enqueue(MARKER)
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        stream = keyed.names.timer_stream("default")
        async with running_worker(keyed) as worker:
            # the worker keeps the delayed task as a schedule in the queue's timers...
            await wait_until(lambda: worker.stats["held"] == 1, timeout=20)
            schedule = await js.get_last_msg(stream, f"{prefix}.s.default.>")
            assert (schedule.headers or {}).get("Nats-Schedule", "").startswith("@at ")
            # ...whose body, replayed straight into the queue, opens as nothing
            await js.publish(f"{prefix}.q.default.later", bytes(schedule.data or b""))
            await wait_until(lambda: worker.stats["dead"] == 1, timeout=20)
    finally:
        await nc.close()
    assert ran == []  # not an hour early
    [record] = await list_dead(keyed)
    assert record.reason == "undecodable"
    assert await handle.status() != "succeeded"


async def test_malformed_sealed_bodies_are_dead_lettered_and_the_queue_goes_on(
    keyed: App, nats_url: str, prefix: str
) -> None:
    """12 bytes (magic, the public key id, 3 bytes) used to raise a ValueError that left
    the message in flight and the queue stalled."""

    @keyed.task
    async def add(a: int, b: int) -> int:
        return a + b

    ident = key_id(parse_key(keyed.settings.encryption_key or ""))
    bodies = [
        LEGACY_MAGIC + ident + b"abc",  # the reported 12 bytes
        MAGIC + ident + b"abc",  # short nonce
        MAGIC + ident + os.urandom(12),  # no tag
        MAGIC + ident + os.urandom(40),  # wrong tag
        MAGIC + b"\x00" * 4 + os.urandom(40),  # unknown key
        MAGIC,
    ]
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        async with running_worker(keyed, concurrency=1) as worker:
            for body in bodies:
                await js.publish(f"{prefix}.q.default.add", body)
            handle = await add.enqueue(1, 2)
            assert await handle.result(timeout=20) == 3
            await wait_until(lambda: worker.stats["dead"] == len(bodies), timeout=20)
    finally:
        await nc.close()
    records = await list_dead(keyed)
    assert [r.reason for r in records] == ["undecodable"] * len(bodies)
    assert all(r.error.message for r in records)


@pytest.mark.parametrize("size", range(0, 40))
@pytest.mark.parametrize("magic", [MAGIC, LEGACY_MAGIC])
def test_every_short_or_garbled_body_is_a_decode_error(size: int, magic: bytes) -> None:
    key = parse_key(new_key())
    body = magic + key_id(key) + os.urandom(size)
    for sealer in (Sealer(key), Sealer(key, legacy=True)):
        with pytest.raises(DecodeError):
            sealer.open(body)


def test_sealer_opens_only_in_its_own_place() -> None:
    sealer = Sealer(parse_key(new_key()))
    sealed = sealer.seal(b"{}", b"result\x00B\x00k1")
    assert sealer.open(sealed, b"result\x00B\x00k1") == b"{}"
    with pytest.raises(DecodeError):
        sealer.open(sealed, b"result\x00B\x00k2")
    with pytest.raises(DecodeError):
        sealer.open(sealed, b"progress\x00B\x00k1")


def _legacy_sealed(key: bytes, body: bytes) -> bytes:
    """`body` sealed as taskq did before contexts (`\\0TQS1`, additional data = the head)."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    head, nonce = LEGACY_MAGIC + key_id(key), os.urandom(12)
    return head + nonce + AESGCM(key).encrypt(nonce, body, head)


def test_legacy_bodies_open_only_where_allowed() -> None:
    key = parse_key(new_key())
    old = _legacy_sealed(key, b"{}")
    with pytest.raises(DecodeError, match="open_legacy_seals"):
        Sealer(key).open(old, b"task\x00p\x00default")
    assert Sealer(key, legacy=True).open(old, b"any\x00place") == b"{}"
    assert Sealer(key, legacy=True).seal(b"{}").startswith(MAGIC)  # new ones are bound


async def test_a_legacy_task_runs_only_with_open_legacy_seals(nats_url: str, prefix: str) -> None:
    key = new_key()
    old = _legacy_sealed(parse_key(key), b'{"args": [2, 3]}')
    nc = await nats.connect(nats_url)
    try:
        for legacy in (False, True):
            application = App(
                url=nats_url, prefix=prefix, encryption_key=key, open_legacy_seals=legacy
            )

            @application.task(name="add")
            async def add(a: int, b: int) -> int:
                return a + b

            try:
                async with running_worker(application) as worker:
                    await nc.jetstream().publish(f"{prefix}.q.default.add", old)
                    done = "succeeded" if legacy else "dead"
                    await wait_until(lambda d=done: worker.stats[d] == 1, timeout=20)
            finally:
                await application.aclose()
    finally:
        await nc.close()


def test_each_place_has_its_own_context() -> None:
    from taskq.records.places import Places

    places = Places("p")
    task = places.at("p.q.default.add", {"Nats-Msg-Id": "01J"})
    assert task is not None and (task.kind, task.owner) == ("task", "01J")
    assert task.context == b"task\x00p\x00default"
    lane = places.at("p.pc.default.0.add")
    assert lane is not None and lane.context == b"task\x00p\x00default" and lane.owner is None
    fired = places.at("p.q.default.add", {"Nats-Scheduler": "p.s.default.01J"})
    schedule = places.at("p.s.default.01J")
    assert fired is not None and schedule is not None
    assert fired.context == schedule.context == b"schedule\x00p.s.default.01J"
    assert fired.owner == schedule.owner == "p.s.default.01J"
    dead = places.at("p.dlq.default.add", {"Taskq-Id": "01J"})
    assert dead is not None and dead.context == b"dead\x00p.dlq.default.add\x0001J"
    result = places.at("$KV.P_RESULTS.01J")
    assert result is not None and result.context == b"result\x00P_RESULTS\x0001J"
    progress = places.at("$KV.P_PROGRESS.01J")
    assert progress is not None and progress.kind == "progress"
    for clear in ("p.limit.unique.x.add", "$KV.P_WORKERS.host", "q.q.default.add", "$KV.P_X.k"):
        assert places.at(clear) is None
